"""Levers 5 and 6 and half precision on real pyannote and NeMo objects.

Lever 5 (`batch_across_units_enabled`): the segmentation and embedding-trunk forwards of a flight's units share
batches; turns and labels must be identical to unit-by-unit, embeddings within lever 4's last-bit tolerance.
Lever 6 (`host_overlap_enabled`): host work runs on its own thread, outside the device lock; outcomes identical,
commits in flight order, errors on either side handled. Half precision: what really runs in reduced precision.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import soundfile as sf
import torch

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.gpu.device.precision import asr_encoder_autocast, cpu_supports_bf16
from batch_assets.gpu.diarization import pipeline as d
from batch_assets.gpu.diarization.embeddings.shared_trunk import SHARED_TRUNK, SHARED_TRUNK_ACROSS_UNITS
from batch_assets.gpu.diarization.flight_batch import segment_files
from batch_assets.gpu.diarization.precompute import precompute_units
from batch_assets.gpu.diarization.vad import as_pyannote_file, run_vad, run_vad_flight
from batch_assets.gpu.section.flight import SectionUnit, process_flight
from batch_assets.gpu.section.levers import Levers
from batch_assets.gpu.section.runner import FlightWork, run_section
from batch_assets.gpu.section.stats import HOST_THREAD, SectionStats
from batch_assets.gpu.steps.resources import GpuResource
from batch_assets.models.loaders import load_diarization_pipeline
from batch_assets.models.production_shaped import COMMUNITY1_SHAPED
from batch_assets.source.pieces import FlightAudio
from batch_assets.storage.resource import REPO_ROOT

from .conftest import in_decoder_mode

SAMPLE = REPO_ROOT / "sample_data" / "audio" / "2026-01-15"
CPU = torch.device("cpu")
SERIAL = {"batch_across_units_enabled": False, "host_overlap_enabled": False}
PIPELINES = ["tiny", pytest.param("production_shaped", marks=pytest.mark.slow)]


def _speech() -> np.ndarray:
    from batch_assets.source.decode import to_target

    clips = []
    for name in ("meetings/standup.wav", "calls/2026/interview.ogg", "meetings/planning.mp3"):
        samples, rate = sf.read(SAMPLE / name, dtype="float32", always_2d=True)
        clips.append(to_target(samples, rate))
    return np.concatenate(clips)


@pytest.fixture(scope="module")
def units() -> dict[str, np.ndarray]:
    """Units of awkward lengths: shorter than a chunk, not a whole number of steps, one of noise only."""
    speech, rng = _speech(), np.random.default_rng(5)
    lengths = {"u-short": 3.3, "u-mid": 17.71, "u-long": 31.05, "u-noise": 12.0, "u-odd": 14.999}
    out, cursor = {}, 0
    for uid, seconds in lengths.items():
        n = int(seconds * 16000)
        if uid == "u-noise":
            out[uid] = rng.normal(0, 0.002, n).astype(np.float32)
        else:
            out[uid] = speech[cursor : cursor + n]
            cursor += n
    return out


def pipeline_and_units(pipeline_name: str, units: dict[str, np.ndarray], request):
    """The named pipeline and its units: the production-shaped ResNet34 costs ~0.6 s a chunk here, so its tests
    take the short, odd-length and noise units."""
    if pipeline_name == "tiny":
        return request.getfixturevalue("tiny").diarization, units
    return request.getfixturevalue(pipeline_name), {k: units[k] for k in ("u-short", "u-noise", "u-odd")}


@pytest.fixture(scope="module")
def tiny(lock_dir):
    return in_decoder_mode(GpuResource(device="cpu", lock_dir=str(lock_dir)).models, Levers())


@pytest.fixture(scope="module")
def production_shaped():
    return d.make_levered(load_diarization_pipeline(COMMUNITY1_SHAPED, CPU, 32, 32))


def flight(units: dict[str, np.ndarray]) -> tuple[np.ndarray, list[SectionUnit]]:
    offsets = np.cumsum([0, *(len(w) for w in units.values())])
    rows = [SectionUnit(uid, int(o), len(w)) for (uid, w), o in zip(units.items(), offsets, strict=False)]
    return np.concatenate(list(units.values())), rows


def assert_same_outcomes(a, b, atol: float = 1e-6) -> None:
    assert [o.unit_id for o in a] == [o.unit_id for o in b]
    for x, y in zip(a, b, strict=True):
        assert (x.result_class, x.reason) == (y.result_class, y.reason), x.unit_id
        assert (x.vad is None) == (y.vad is None) and (x.diarization is None) == (y.diarization is None)
        if x.vad is not None:
            assert x.vad.regions == y.vad.regions and np.array_equal(x.vad.scores.data, y.vad.scores.data)
        if x.diarization is not None:
            assert (x.diarization.turns == y.diarization.turns
                    and x.diarization.exclusive_turns == y.diarization.exclusive_turns)
            assert list(x.diarization.embeddings) == list(y.diarization.embeddings)  # the same labels, in order
            for label, vector in x.diarization.embeddings.items():
                np.testing.assert_allclose(y.diarization.embeddings[label], vector, rtol=0, atol=atol)
        assert x.words == y.words


# -- lever 5 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("pipeline_name", PIPELINES)
def test_batched_segmentation_is_stocks_per_unit_scores(pipeline_name, units, request):
    pipeline, units = pipeline_and_units(pipeline_name, units, request)
    inference = adapter.segmentation_inference(pipeline)
    files = [as_pyannote_file(w, uid) for uid, w in units.items()]
    batched = segment_files(inference, files)
    for file, ours in zip(files, batched, strict=True):
        stock = inference(file)
        assert ours.data.shape == stock.data.shape
        assert np.array_equal(ours.data, stock.data), file["uri"]  # powerset one-hot: the decisions, bit for bit
        assert (ours.sliding_window.start, ours.sliding_window.duration, ours.sliding_window.step) == \
            (stock.sliding_window.start, stock.sliding_window.duration, stock.sliding_window.step)
    flight_vad, _ = run_vad_flight(pipeline, units)
    for uid, waveform in units.items():
        assert flight_vad[uid].regions == run_vad(pipeline, waveform, uid).regions


def diarize_all(pipeline, units: dict[str, np.ndarray], across: bool):
    calls = {uid: d.DiarizationCall() for uid in units}
    files = {uid: d.diarization_file(w, uid, calls[uid]) for uid, w in units.items()}
    forwards = precompute_units(pipeline, files, across)
    assert not forwards.failed and not forwards.batch_fallback
    assert 0 < forwards.host_s < 60  # binarizing and counting speakers: host seconds, reported apart from the forwards
    return {uid: d.diarize(pipeline, None, uid, call=calls[uid], file=files[uid]) for uid in units}, calls


@pytest.mark.parametrize("pipeline_name", PIPELINES)
def test_lever_5_gives_unit_by_unit_turns_labels_and_embeddings(pipeline_name, units, request):
    pipeline, units = pipeline_and_units(pipeline_name, units, request)
    whole = {uid: d.diarize(pipeline, w, uid) for uid, w in units.items()}  # stock calls, nothing precomputed
    alone, _ = diarize_all(pipeline, units, across=False)
    batched, calls = diarize_all(pipeline, units, across=True)
    assert sum(len(r.turns) for r in whole.values()) > 0
    assert any(r.embedding_work.path != "not run" for r in whole.values())  # the trunk ran for some unit
    for uid in units:
        for other in (alone[uid], batched[uid]):
            assert other.turns == whole[uid].turns and other.exclusive_turns == whole[uid].exclusive_turns, uid
            assert list(other.embeddings) == list(whole[uid].embeddings), uid
            for label, vector in whole[uid].embeddings.items():
                # other batch companions may move a last bit of an embedding (lever 4's tolerance)
                np.testing.assert_allclose(other.embeddings[label], vector, rtol=0, atol=1e-6)
        assert calls[uid].device_s == 0.0  # the call itself ran no forward: it was all precomputed
        if whole[uid].embedding_work.path != "not run":
            assert whole[uid].embedding_work.path == alone[uid].embedding_work.path == SHARED_TRUNK
            assert batched[uid].embedding_work.path == SHARED_TRUNK_ACROSS_UNITS
            assert batched[uid].embedding_work.counts() == whole[uid].embedding_work.counts()


def test_lever_5_runs_fewer_segmentation_forwards_and_identical_flights(tiny, units):
    audio, rows = flight(units)
    outcomes, forwards = {}, {}
    for name, levers in {"unit by unit": Levers(**SERIAL), "batched": Levers(host_overlap_enabled=False)}.items():
        stats = SectionStats()
        outcomes[name] = process_flight(tiny, "f", audio, rows, levers, stats)
        forwards[name] = stats.segmentation_forwards["vad"]
        assert stats.batch_fallbacks == 0 and stats.host_phase_device_s == 0.0
    assert_same_outcomes(outcomes["unit by unit"], outcomes["batched"])
    assert 0 < forwards["batched"] < forwards["unit by unit"]  # a unit's last padded chunk no longer a forward alone
    assert {o.result_class.value for o in outcomes["batched"]} >= {"transcribed", "silent"}


def test_a_batch_that_fails_part_way_keeps_its_host_seconds_and_fails_its_units_alone(tiny, units):
    """Lever 5's batched forwards raise after the host work of binarizing and counting speakers (every forward of
    the embedding model refuses: a torch forward pre-hook): the flight falls back unit by unit, every diarized unit
    fails with the error as its reason, the silent one stays silent, and the host seconds done before the raise
    stay host seconds (they were once booked as device seconds)."""

    def refuse(module, inputs):
        raise RuntimeError("embedding refused (test)")

    audio, rows = flight(units)
    stats = SectionStats()
    handles = [m.register_forward_pre_hook(refuse) for m in adapter.embedding_model(tiny.diarization).modules()]
    try:
        outcomes = process_flight(tiny, "f", audio, rows, Levers(host_overlap_enabled=False), stats)
    finally:
        for handle in handles:
            handle.remove()
    assert stats.batch_fallbacks == 1
    classes = {o.unit_id: (o.result_class.value, o.reason) for o in outcomes}
    assert classes["u-noise"][0] == "silent"
    failed = {uid for uid, (c, reason) in classes.items() if c == "failed" and "embedding refused (test)" in reason}
    assert failed == set(units) - {"u-noise"}
    assert stats.host_seconds["diarization"] > 0  # binarizing and counting speakers, before the trunk raised


def test_a_unit_whose_clustering_fails_changes_no_other_units_words(tiny, units, monkeypatch):
    """With lever 5 or 6 a unit's clustering runs after the flight's ASR, without them before it. The unit that fails
    there must not change which units share the ASR batches: a batch's companions move the last bits of each
    forward, and so the others' word scores and even word ends (measured before the fix: 1e-4 and an 80 ms end,
    levers on vs off). pyannote's clustering refuses u-long (its number of chunks)."""
    inference = adapter.segmentation_inference(tiny.diarization)
    chunks = segment_files(inference, [as_pyannote_file(units["u-long"], "u-long")])[0].data.shape[0]
    clustering = type(tiny.diarization.clustering)
    stock = clustering.__call__

    def refusing(self, *args, **kwargs):
        if kwargs["segmentations"].data.shape[0] == chunks:
            raise RuntimeError("clustering refused (test)")
        return stock(self, *args, **kwargs)

    monkeypatch.setattr(clustering, "__call__", refusing)
    transcribe, batches = tiny.asr.transcribe, []  # what NeMo is asked to transcribe: the pieces' lengths

    def recording(audio, **kwargs):
        batches.append([len(piece) for piece in audio])
        return transcribe(audio, **kwargs)

    monkeypatch.setattr(tiny.asr, "transcribe", recording)
    audio, rows = flight(units)
    outcomes, asked = {}, {}
    for name, levers in (("levers 5 on", {"host_overlap_enabled": False}), ("levers 5, 6 off", SERIAL)):
        batches.clear()
        outcomes[name] = process_flight(tiny, "f", audio, rows, Levers(**levers), SectionStats())
        asked[name] = list(batches)
        failed = {o.unit_id: o.reason for o in outcomes[name] if o.result_class.value == "failed"}
        assert failed == {"u-long": "RuntimeError: clustering refused (test)"}
    assert asked["levers 5 on"] == asked["levers 5, 6 off"] and len(asked["levers 5 on"]) == 1
    assert_same_outcomes(outcomes["levers 5 on"], outcomes["levers 5, 6 off"])


# -- lever 6 ---------------------------------------------------------------------------------------
def run_flights(models, units: dict[str, np.ndarray], levers: Levers, committed: list,
                fail_commit_of: str | None = None, fail_load_of: str | None = None):
    """Two units a flight through `run_section`; each commit recorded in `committed` (flight, outcomes, thread)."""
    names = list(units)
    flights = {f"flight-{i // 2:04d}": dict(list(units.items())[i : i + 2]) for i in range(0, len(names), 2)}

    def load(flight_id: str) -> FlightAudio:
        if flight_id == fail_load_of:
            raise OSError(f"cannot read {flight_id}")
        return FlightAudio(flight_id, flight(flights[flight_id])[0], {})

    def commit(flight_id: str, outcomes) -> None:
        if flight_id == fail_commit_of:
            raise RuntimeError(f"storage refused {flight_id}")
        committed.append((flight_id, outcomes, threading.current_thread().name))

    work = [FlightWork(f, sum(len(w) for w in us.values()) / 16000, flight(us)[1]) for f, us in flights.items()]
    return run_section(models, work, levers, load=load, commit=commit)


def test_lever_6_gives_identical_outcomes_off_the_device_path(tiny, units):
    serial_commits, overlap_commits = [], []
    serial = run_flights(tiny, units, Levers(**SERIAL), serial_commits)
    overlap = run_flights(tiny, units, Levers(batch_across_units_enabled=False), overlap_commits)
    assert ([c[0] for c in overlap_commits] == [c[0] for c in serial_commits]
            == ["flight-0000", "flight-0001", "flight-0002"])
    for (_, a, _), (_, b, _) in zip(serial_commits, overlap_commits, strict=True):
        assert_same_outcomes(a, b)
    assert {c[2] for c in serial_commits} == {threading.current_thread().name}
    assert all(c[2].startswith(HOST_THREAD) for c in overlap_commits)
    for report in (serial, overlap):
        assert report.flights == 3 and report.units == len(units) and report.stats.host_phase_device_s == 0.0
    host = sum(overlap.stats.host_seconds.values())
    assert overlap.stats.overlapped_host_s > 0 and overlap.stats.host_in_section_s < host
    assert serial.stats.overlapped_host_s == 0 and serial.host_after_section_s == 0
    assert overlap.host_after_section_s > 0


def test_lever_6_a_failed_commit_stops_the_section_and_keeps_earlier_commits(tiny, units):
    committed: list = []
    with pytest.raises(RuntimeError, match="storage refused flight-0001"):
        run_flights(tiny, units, Levers(), committed, fail_commit_of="flight-0001")
    assert [c[0] for c in committed] == ["flight-0000"]


def test_lever_6_a_device_side_failure_still_commits_the_flight_handed_over(tiny, units):
    committed: list = []
    with pytest.raises(OSError, match="cannot read flight-0002"):
        run_flights(tiny, units, Levers(prepare_flight_enabled=False), committed, fail_load_of="flight-0002")
    assert [c[0] for c in committed] == ["flight-0000", "flight-0001"]  # flight-0001's host work finished first


# -- half precision --------------------------------------------------------------------------------
@pytest.mark.skipif(not cpu_supports_bf16(),
                    reason="this CPU has no bfloat16 instructions: half precision stays float32")
def test_half_precision_runs_the_asr_encoder_in_bf16_and_hands_float32_on(tiny, units):
    """Through the section's own ASR call (`transcribe_segments`): calling the shared model's encoder directly
    would change NeMo's state for every later test in the session (measured: 308 of 383 words moved)."""
    from batch_assets.gpu.asr.transcribe import Segment, transcribe_segments

    asr = tiny.asr
    seen: list[torch.dtype] = []
    linear = next(m for m in asr.encoder.modules() if isinstance(m, torch.nn.Linear))
    handle = linear.register_forward_hook(lambda _m, _a, out: seen.append(out.dtype))
    words = {}
    try:
        for enabled in (False, True):
            seen.clear()
            with asr_encoder_autocast(asr, CPU, enabled):
                words[enabled] = transcribe_segments(asr, {"u": units["u-mid"]}, [Segment("u", 0.0, 17.0)],
                                                     batch_size=1)
            assert set(seen) == ({torch.bfloat16} if enabled else {torch.float32})
    finally:
        handle.remove()
    assert words[False] and words[True]  # the decoder and joint took the encoder's output: it was cast back to float32
    seen.clear()
    assert transcribe_segments(asr, {"u": units["u-mid"]}, [Segment("u", 0.0, 17.0)], batch_size=1) == words[False]


@pytest.mark.skipif(not cpu_supports_bf16(),
                    reason="this CPU has no bfloat16 instructions: half precision stays float32")
def test_half_precision_trunk_and_words_stay_close(tiny, units):
    audio, rows = flight(units)
    full = process_flight(tiny, "f", audio, rows, Levers(), SectionStats())
    half = process_flight(tiny, "f", audio, rows, Levers(half_precision_enabled=True), SectionStats())
    words_full = [w.word for o in full for w, _ in o.words]
    words_half = [w.word for o in half for w, _ in o.words]
    assert words_full and words_half
    assert [o.result_class for o in full] == [o.result_class for o in half]
    changed = any(not np.array_equal(f.diarization.embeddings[k], h.diarization.embeddings.get(k, np.zeros(0)))
                  for f, h in zip(full, half, strict=True) if f.diarization and h.diarization
                  for k in f.diarization.embeddings)
    assert changed  # the trunk ran in bfloat16: embeddings moved (whether results hold is the gate's call)
