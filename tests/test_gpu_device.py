"""On a CUDA device (skipped without one: `make test` here has none; run it where there is one): lever 3's CUDA
graphs in TDT decoding give the words and times of decoding without them, through the section's own decoder-mode
code (`gpu/asr.py`), with the decoder checked before and after each call (`gpu/decoder_check.py`, which
`benchmarks/gpu_decoder_check.py` runs too, for the longer report: timings, tampering caught)."""

from __future__ import annotations

import pytest

from batch_assets.gpu.decoder_check import decode_in_mode, folder_audio, segments_of, word_key
from batch_assets.models.tiny_asr import build_tiny_tdt
from batch_assets.storage.resource import REPO_ROOT, SAMPLE_PARTITION

pytestmark = pytest.mark.gpu


def test_cuda_graphs_decode_the_words_of_decoding_without_them():
    import torch

    device = torch.device("cuda")
    model = build_tiny_tdt(seed=20260115).to(device).eval()
    audio = folder_audio(REPO_ROOT / "sample_data" / "audio" / SAMPLE_PARTITION)
    segments = segments_of(audio, 10.0)
    words, settings = {}, None
    for enabled in (True, False, True):  # the decoder's mode is checked before and after each call
        settings, decoded, _ = decode_in_mode(model, device, enabled, audio, segments, 16, settings)
        words.setdefault(enabled, []).append(word_key(decoded))
    assert words[True][0] and words[True][0] == words[False][0] == words[True][1]
