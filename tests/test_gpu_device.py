"""On a CUDA device (skipped without one: `make test` here has none; run it where there is one): lever 3's CUDA
graphs in TDT decoding give the words and times of decoding without them, through the section's own decoder-mode
code (`gpu/asr/transcribe.py`), with the decoder checked before and after each call (`gpu/asr/decoder_check.py`, which
`benchmarks/gpu_decoder_check.py` runs too, for the longer report: timings, tampering caught); and a flight through
the section leaves CPython's shared `b" "` whole after the CUDA-graph build and runs ASR at the TF32 asked for; the
Japanese hybrid TDT-CTC model takes the graphs with its TDT head."""

from __future__ import annotations

import pytest

from batch_assets.gpu.asr.decoder_check import decode_in_mode, folder_audio, segments_of, word_key
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


def test_the_ja_shaped_hybrid_decodes_with_its_tdt_head_and_cuda_graphs():
    """Issue 47 on the device: the hybrid TDT-CTC model at parakeet-tdt_ctc-0.6b-ja's sizes, loaded as the section
    loads it, decodes the sample's Japanese call with its transducer head, CUDA graphs taken (asserted after the
    call) and the same tokens and times without them."""
    import torch

    from batch_assets.gpu.section.loaded import load_asr
    from batch_assets.models.production_shaped import PARAKEET_JA_SHAPED

    device = torch.device("cuda")
    model = load_asr(PARAKEET_JA_SHAPED, device)
    audio = {"ja": folder_audio(REPO_ROOT / "sample_data" / "audio" / "2026-01-17")["ja_call"]}
    segments = segments_of(audio, 10.0)
    words, settings, modes = {}, None, set()
    for enabled in (True, False, True):
        settings, decoded, info = decode_in_mode(model, device, enabled, audio, segments, 16, settings)
        words.setdefault(enabled, []).append(word_key(decoded))
        modes.add(info["after"])
    assert model.cur_decoder == "rnnt" and settings["head"] == "transducer"
    assert "eager" in modes and any(m.startswith("cuda_graphs:") for m in modes)
    assert words[True][0] and words[True][0] == words[False][0] == words[True][1]


def test_a_flight_on_cuda_keeps_the_shared_space_and_asr_runs_at_the_tf32_asked_for(tmp_path):
    """Issue 46 on the device: after the section's first CUDA-graph build (NeMo's NVRTC call, through
    `gpu/adapters/nemo_adapter.py`) CPython's shared `b" "` is still a space and `.npy` bytes load back; the ASR
    encoder runs with TF32 as `tf32_enabled` says although pyannote turned it off in the same flight, and the setting is
    restored after."""
    import io

    import numpy as np
    import torch

    from batch_assets.gpu.device.faults import interpreter_damaged
    from batch_assets.gpu.section.flight import SectionUnit, process_flight
    from batch_assets.gpu.section.levers import Levers
    from batch_assets.gpu.section.stats import SectionStats
    from batch_assets.gpu.steps.resources import GpuResource

    from .conftest import in_decoder_mode

    audio = folder_audio(REPO_ROOT / "sample_data" / "audio" / SAMPLE_PARTITION)
    pieces = list(audio.values())[:3]
    offsets = np.cumsum([0, *(len(p) for p in pieces)])
    units = [SectionUnit(f"u{i}", int(o), len(p)) for i, (o, p) in enumerate(zip(offsets, pieces, strict=False))]
    models = GpuResource(device="cuda", lock_dir=str(tmp_path)).models
    seen: list[bool] = []
    models.asr.encoder.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cuda.matmul.allow_tf32))
    for tf32 in (True, False):
        seen.clear()
        levers = Levers(tf32_enabled=tf32)
        before = torch.backends.cuda.matmul.allow_tf32
        outcomes = process_flight(in_decoder_mode(models, levers), "f", np.concatenate(pieces), units, levers,
                                  SectionStats())
        assert any(o.words for o in outcomes) and seen and set(seen) == {tf32}
        assert torch.backends.cuda.matmul.allow_tf32 == before
    assert not interpreter_damaged()
    buffer = io.BytesIO()
    np.save(buffer, np.zeros((79, 589, 3), np.float32))
    assert np.load(io.BytesIO(buffer.getvalue())).shape == (79, 589, 3)
