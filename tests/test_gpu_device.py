"""On a CUDA device (skipped without one: `make test` here has none; run it where there is one): lever 3's CUDA
graphs in TDT decoding give the words and times of decoding without them, through the section's own decoder-mode
code (`gpu/asr.py`), with the decoder checked before and after each call. `benchmarks/gpu_decoder_check.py` is the
longer report (tampering caught, timings)."""

from __future__ import annotations

import pytest
import soundfile as sf

from batch_assets.gpu.asr import Segment, apply_decoder_mode, check_decoder_mode, transcribe_segments
from batch_assets.models.tiny_asr import build_tiny_tdt
from batch_assets.storage import REPO_ROOT, SAMPLE_PARTITION

pytestmark = pytest.mark.gpu


def test_cuda_graphs_decode_the_words_of_decoding_without_them():
    import torch

    device = torch.device("cuda")
    model = build_tiny_tdt(seed=20260115).to(device).eval()
    audio, segments = {}, []
    for path in sorted((REPO_ROOT / "sample_data" / "audio" / SAMPLE_PARTITION).rglob("*")):
        if path.suffix in (".wav", ".flac", ".ogg"):
            samples, rate = sf.read(path, dtype="float32", always_2d=True)
            assert rate == 16000
            audio[path.stem] = samples.mean(axis=1)
            duration = len(samples) / rate
            segments += [Segment(path.stem, s, min(duration, s + 10.0)) for s in range(0, int(duration - 1.0), 10)]
    words, settings = {}, None
    for enabled in (True, False, True):
        settings = apply_decoder_mode(model, enabled, settings)
        check_decoder_mode(model, device, enabled, "before")
        decoded = transcribe_segments(model, audio, segments, 16)
        check_decoder_mode(model, device, enabled, "after")
        words.setdefault(enabled, []).append([(w.unit_id, w.start_s, w.end_s, w.word) for w in decoded])
    assert words[True][0] and words[True][0] == words[False][0] == words[True][1]
