"""A unit's words do not depend on what shares its ASR batches (issue 56), and the NeMo reach that makes it so;
the spaces an ASR model emits inside a language written without them are kept.

One unit's segments transcribed alone, then batched with other units' segments of other lengths (longer, shorter,
first and last in the list, sorted and unsorted, several per batch), on the real builtin and production-shaped TDT
models: every column of every word is identical. NeMo's own decoder (`torch_impl`, kept by the adapter as
`_nemo_torch_impl`) and normalization are checked still to move words with the companions: when an upgrade fixes
them, this says so (drop the fix in `gpu/adapters/nemo_adapter.py`). The decoder's state, with CUDA graphs too, has
the ASR batch size's rows whatever ran before (issue 65; its CUDA case runs where a device is lent).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import soundfile as sf
import torch

from batch_assets.gpu.adapters import nemo_adapter
from batch_assets.gpu.asr.transcribe import Segment, apply_decoder_mode, transcribe_segments
from batch_assets.models.loaders import load_asr_model
from batch_assets.models.names import TINY_TDT
from batch_assets.models.production_shaped import PARAKEET_SHAPED
from batch_assets.source.decode import to_target
from batch_assets.storage.resource import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_data" / "audio" / "2026-01-15"


@pytest.fixture(scope="module")
def audio() -> dict[str, np.ndarray]:
    out = {}
    for uid, name in (("a", "meetings/standup.wav"), ("b", "calls/2026/interview.ogg"), ("c", "meetings/planning.mp3")):
        samples, rate = sf.read(SAMPLE / name, dtype="float32", always_2d=True)
        out[uid] = to_target(samples, rate)
    return out


def _segments(audio: dict[str, np.ndarray]) -> tuple[list[Segment], list[Segment]]:
    """Unit a's segments (6 s and 3.3 s), and companions from b and c: longer, shorter, one of 1 s."""
    unit = [Segment("a", 0.0, 6.0), Segment("a", 6.5, 9.8)]
    others = [Segment("b", 0.0, 8.0), Segment("c", 1.0, 4.0), Segment("c", 4.0, 5.0), Segment("c", 5.0, 12.0)]
    return unit, others


def _words_of(model, audio, segments, batch_size: int, unit: str = "a") -> list:
    words = [w for w in transcribe_segments(model, audio, segments, batch_size) if w.unit_id == unit]
    return sorted(words, key=lambda w: (w.start_s, w.end_s))  # the unit's words in time, whatever its segments' order


def _companion_runs(model, audio, only: tuple[str, ...] = ()) -> tuple[list, dict[str, list]]:
    """Unit a's words alone, and in each batching (`only` those named)."""
    unit, others = _segments(audio)
    alone = _words_of(model, audio, unit, 8)
    shuffled = [others[2], unit[1], others[0], others[3], unit[0], others[1]]
    batchings = {"after others": (others + unit, 8), "before others": (unit + others, 8),
                 "shuffled, batches of 2": (shuffled, 2), "one longer companion": ([others[0], *unit], 3)}
    return alone, {label: _words_of(model, audio, segments, size) for label, (segments, size) in batchings.items()
                   if not only or label in only}


@pytest.mark.parametrize("model_name", [pytest.param(TINY_TDT, id="tiny"),
                                        pytest.param(PARAKEET_SHAPED, id="production_shaped",
                                                     marks=pytest.mark.slow)])
@pytest.mark.parametrize(("device", "cuda_graphs"), [
    pytest.param("cpu", False, id="cpu"),  # graphs never run on a CPU: lever 3 on decodes as off there
    pytest.param("cuda", False, id="cuda-eager", marks=pytest.mark.gpu),
    pytest.param("cuda", True, id="cuda-graphs", marks=pytest.mark.gpu)])
def test_a_units_words_are_the_same_alone_and_batched_with_any_companions(audio, model_name, device, cuda_graphs):
    """Every column (text, start, end, score) of unit a's words, alone and in four batchings with segments of
    other lengths (one for the production shape on a CPU); the decoder mode the run asks for is applied as the
    section does."""
    torch.manual_seed(0)
    model = load_asr_model(model_name, torch.device(device))
    apply_decoder_mode(model, cuda_graphs, None)
    # the suite's budget: on a CPU the production shape takes one batching (other lengths and a longer companion in
    # its batch), the builtin model every one
    only = ("after others",) if device == "cpu" and model_name == PARAKEET_SHAPED else ()
    alone, runs = _companion_runs(model, audio, only)
    assert alone and all(w.score is not None for w in alone)
    for label, words in runs.items():
        assert words == alone, (label, [(a, b) for a, b in zip(alone, words, strict=False) if a != b][:3])


@pytest.mark.parametrize(("device", "cuda_graphs"), [
    pytest.param("cpu", False, id="cpu"),
    pytest.param("cuda", True, id="cuda-graphs", marks=pytest.mark.gpu)])
def test_the_decoders_state_has_the_batch_sizes_rows_whatever_ran_before(audio, device, cuda_graphs):
    """Issue 65: the TDT decoder's state (with CUDA graphs, the state the graphs are captured for) has as many rows as
    the ASR batch size, a short batch and a larger one before it included (NeMo's own grows with the largest batch
    the process decoded, and graphs replay at that size); unit a's words from a fresh decoder and after a larger
    batch are the same, every column."""
    model = load_asr_model(TINY_TDT, torch.device(device))
    apply_decoder_mode(model, cuda_graphs, None)
    computer = lambda: model.decoding.decoding.decoding_computer  # noqa: E731 (a timestamps request may rebuild it)
    unit, others = _segments(audio)
    fresh = _words_of(model, audio, unit, 4)
    rows = [computer().state.batch_size]
    _words_of(model, audio, others + unit, 6)
    rows.append(computer().state.batch_size)
    after = _words_of(model, audio, unit, 4)
    rows.append(computer().state.batch_size)
    assert rows == [4, 6, 4] and fresh and after == fresh
    graphs = computer().full_graph is not None or computer().separate_graphs is not None
    assert graphs == cuda_graphs, "graphs captured only where lever 3 runs them (CUDA)"


@pytest.fixture(scope="module")
def tiny():
    model = load_asr_model(TINY_TDT, torch.device("cpu"))
    apply_decoder_mode(model, False, None)
    return model


def test_every_segment_of_a_flight_is_heard_as_it_is_alone(audio, tiny):
    """A flight's worth of segments (3-30 s, cut at random from three recordings) in the section's CPU batches, longest
    first, against each segment transcribed by itself (alone in its batch): every word, every column. (What is left of
    the batch in a segment's forward is float arithmetic: a GEMM of another shape may sum in another order, which
    moved one score of 586 in its fourth decimal in `benchmarks/asr_batches.py`; never a word, a start or an end.)"""
    import numpy as np

    rng, segments = np.random.default_rng(56), []
    for uid, samples in audio.items():
        cursor, length = 0.0, len(samples) / 16_000
        while cursor < length - 1.0:
            end = min(length, cursor + float(rng.uniform(3.0, 30.0)))
            segments.append(Segment(uid, round(cursor, 2), round(end, 2)))
            cursor = end
    batched = transcribe_segments(tiny, audio, segments, 8)
    alone = [w for segment in segments for w in transcribe_segments(tiny, audio, [segment], 8)]
    assert len(segments) > 8 and len(batched) > 200
    without_scores = lambda words: [(w.unit_id, w.start_s, w.end_s, w.word) for w in words]  # noqa: E731
    assert without_scores(batched) == without_scores(alone)
    assert max(abs(a.score - b.score) for a, b in zip(alone, batched, strict=True)) <= 1e-4
    assert sum(a != b for a, b in zip(alone, batched, strict=True)) <= len(alone) // 100


def test_an_unspaced_units_tokens_keep_the_spaces_the_model_emits(audio, tiny):
    """A unit heard as tokens (a language written without spaces) keeps the spaces its model emits inside a segment:
    its tokens joined with nothing give the segment's words joined with spaces (here the English model's, whose
    pieces start words, as a Latin-script name's do in a Japanese call)."""
    segments = [Segment("a", 0.0, 6.0), Segment("a", 6.5, 9.8)]
    words = transcribe_segments(tiny, audio, segments, 8)
    tokens = transcribe_segments(tiny, audio, segments, 8, token_units=frozenset({"a"}))
    assert len(tokens) > len(words) > 3
    for segment in segments:
        heard = [w.word for w in tokens if segment.start_s <= w.start_s < segment.end_s]
        assert "".join(heard) == " ".join(w.word for w in words if segment.start_s <= w.start_s < segment.end_s)
        assert not heard[0].startswith(" ")


def test_nemos_own_decoder_and_normalization_still_move_words_with_the_batch(audio, tiny):
    """Without the adapter's decoder and normalization, NeMo 3.0.0 gives unit a other words when companions share its
    batch: its decoder other word ends (the defect issue 56 measured: 11 of 105 word rows), its normalization other
    scores (in the fourth decimal, on a flight's worth of segments: `benchmarks/asr_batches.py`). When this fails,
    NeMo fixed it: drop `install_batch_invariance`'s part that no longer changes anything."""
    computer = nemo_adapter.nemo_tdt_computer()
    features, _ = nemo_adapter.nemo_normalize_batch()
    nemo_adapter.install_batch_invariance()
    assert computer.torch_impl is nemo_adapter._stateful_torch_impl
    assert features.normalize_batch is nemo_adapter._per_row_normalize_batch
    try:
        computer.torch_impl = computer._nemo_torch_impl
        alone, runs = _companion_runs(tiny, audio)
        moved = [(a, b) for a, b in zip(alone, runs["after others"], strict=True) if a != b]
        assert moved and all(a.word == b.word and a.start_s == b.start_s and a.end_s != b.end_s for a, b in moved)
    finally:
        computer.torch_impl = nemo_adapter._stateful_torch_impl
    import numpy as np

    frames = torch.from_numpy(np.random.default_rng(56).normal(size=(2, 80, 700)).astype(np.float32))
    lengths = torch.tensor([700, 333])
    nemo_rows = nemo_adapter._ORIGINAL_NORMALIZE[0](frames, lengths, "per_feature")[0]
    nemo_alone = nemo_adapter._ORIGINAL_NORMALIZE[0](frames[1:, :, :333], lengths[1:], "per_feature")[0]
    assert not torch.equal(nemo_rows[1, :, :333], nemo_alone[0])  # the padded length moves NeMo's last bits
    rows = nemo_adapter._per_row_normalize_batch(frames, lengths, "per_feature")[0]
    by_itself = nemo_adapter._per_row_normalize_batch(frames[1:, :, :333], lengths[1:], "per_feature")[0]
    assert torch.equal(rows[1, :, :333], by_itself[0]) and not rows[1, :, 333:].any()
    torch.testing.assert_close(rows, nemo_rows, rtol=1e-5, atol=1e-5)  # the same statistics


def test_the_adapter_knows_nemos_functions_and_leaves_nemo_alone_when_it_cannot_read_a_source(caplog):
    """Fails on a NeMo upgrade that changes `torch_impl` (look whether it still overwrites `durations` for the whole
    batch) or `cuda_graphs_impl` (whether its state still grows only), then update the adapter. A NeMo function
    whose source cannot be read (NeMo installed without its `.py` files: here a `run_nvrtc` made by `exec`) is left
    as it is, with a warning that says why, not a crash."""
    import importlib
    import inspect

    import nemo

    assert nemo.__version__ == nemo_adapter.NEMO_VERSION, "NeMo upgraded: check gpu/adapters/nemo_adapter.py"
    computer = nemo_adapter.nemo_tdt_computer()
    nemo_adapter.install_batch_invariance()
    assert computer.torch_impl is nemo_adapter._stateful_torch_impl
    assert computer.cuda_graphs_impl is nemo_adapter._sized_cuda_graphs_impl
    assert nemo_adapter.install_batch_invariance() == []  # once is enough
    for original, digest in ((computer._nemo_torch_impl, nemo_adapter.NEMO_TDT_TORCH_IMPL_SHA256),
                             (computer._nemo_cuda_graphs_impl, nemo_adapter.NEMO_TDT_CUDA_GRAPHS_IMPL_SHA256)):
        assert hashlib.sha256(inspect.getsource(original).encode()).hexdigest() == digest
    nemo_adapter.nemo_normalize_batch()  # NemoChanged when its source differs
    module = importlib.import_module(nemo_adapter.NVRTC_MODULE)
    namespace: dict = {}
    exec("def run_nvrtc(kernel_string, kernel_name, program_name):\n    return None\n", namespace)  # no file
    before, module.run_nvrtc = module.run_nvrtc, namespace["run_nvrtc"]
    try:
        assert nemo_adapter.install_nvrtc_fix() == []
        assert module.run_nvrtc is namespace["run_nvrtc"]
    finally:
        module.run_nvrtc = before
    assert "NVRTC log fix not installed: cannot read the source of" in caplog.text
    assert "install NeMo with its source files" in caplog.text
