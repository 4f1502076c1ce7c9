"""Long units in windows (`batch_assets/long_units/windows.py`): one label per voice across windows, short units
untouched, and a kill in the middle of a unit resumed from its last committed window.

The long unit is 440-odd seconds of the sample's four voices (`batch_assets/long_units/long_audio.py`), cut into
120-second windows overlapped by 10 s (four of them), beside two sample units shorter than a window. The windowed run is
shared by the tests here; the kill is real (SIGKILL to the run's process group) and the re-execution is Dagster's."""

from __future__ import annotations

import collections
import io
import json
import pathlib
import shutil

import dagster as dg
import numpy as np
import polars as pl
import pytest

from batch_assets.ingest.speaker_hints import SpeakerHints
from batch_assets.long_units.windows import (
    SAMPLE_RATE,
    Window,
    WindowSpec,
    cores,
    link_speakers,
    piece_id,
    split_windows,
)
from batch_assets.source.decode import decode_file, stream_file
from batch_assets.source.identity import ObjectVersion

from . import deployments
from .conftest import SAMPLE_SOURCE, TABLES, assert_same_results, make_resources, materialize_partition, tables_of
from .published_arrays import assert_arrays_load

LONG_DAY = "2026-03-02"
LONG_KEY = "hearings/long_hearing.flac"
LONG_ID = "hearings__long_hearing.flac"
SHORT_KEYS = ["meetings/standup.wav", "calls/2026/support_call.flac"]
WINDOWED = {"ops": {"prepared_flights": {"config": {"max_unit_seconds": 120.0, "window_overlap_seconds": 10.0}}}}


# -- the pieces, without models ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seconds", [30.0, 120.0, 121.0, 335.5, 440.0])
def test_windows_cover_the_stream_and_their_cores_tile_it(seconds):
    spec = WindowSpec(120.0, 10.0)
    signal = np.random.default_rng(1).normal(size=int(seconds * SAMPLE_RATE)).astype(np.float32)
    pieces = np.array_split(signal, 37)  # pieces of any size, as a decoder gives them
    windows = list(split_windows(pieces, spec))
    for start_s, samples in windows:
        begin = round(start_s * SAMPLE_RATE)
        assert np.array_equal(samples, signal[begin : begin + len(samples)])
        assert len(samples) <= 120 * SAMPLE_RATE and start_s == int(start_s)
    last_start, last = windows[-1]
    assert round(last_start * SAMPLE_RATE) + len(last) == len(signal)  # nothing is lost at the end
    assert len(windows) == (1 if seconds <= 120 else 1 + int(np.ceil((seconds - 120) / 110)))
    spans = cores([Window(f"w{i}", i, s, len(a) / SAMPLE_RATE, "f") for i, (s, a) in enumerate(windows)])
    assert spans[0][0] == 0.0 and spans[-1][1] == pytest.approx(seconds)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_window_settings_are_whole_seconds_with_a_bounded_overlap():
    with pytest.raises(ValueError, match="whole seconds"):
        WindowSpec(1800.5, 30.0)
    with pytest.raises(ValueError, match="window_overlap_seconds at least 10 .* and at most a quarter"):
        WindowSpec(120.0, 40.0)
    with pytest.raises(ValueError, match="window_overlap_seconds at least 10"):
        WindowSpec(120.0, 5.0)
    assert not WindowSpec().windowed(1800.0) and WindowSpec().windowed(1800.1)
    assert piece_id("u", None) == "u" and piece_id("u", 3) == "u.w0003"


@pytest.mark.parametrize("key", ["meetings/standup.wav", "calls/2026/support_call.flac", "meetings/planning.mp3",
                                 "calls/2026/interview.ogg"])
def test_streamed_decoding_is_the_whole_decode(key):
    whole, _ = decode_file(str(SAMPLE_SOURCE / "2026-01-15" / key), key[key.rindex("."):])
    streamed = stream_file(str(SAMPLE_SOURCE / "2026-01-15" / key), key[key.rindex("."):])
    assert np.array_equal(np.concatenate(list(streamed)), whole)


def test_a_body_cut_off_streams_what_decodes_as_the_whole_decode_does(tmp_path):
    """soundfile loses sync part-way through a cut FLAC: the stream goes on with ffmpeg from there, as decode_file
    falls back to ffmpeg, so a long unit cut off is windowed up to where its audio ends (then classed truncated)."""
    data = (SAMPLE_SOURCE / "2026-01-15" / "calls/2026/support_call.flac").read_bytes()
    cut = tmp_path / "cut.flac"
    cut.write_bytes(data[: len(data) // 2])
    whole, _ = decode_file(str(cut), ".flac")
    assert 0 < len(whole) and np.array_equal(np.concatenate(list(stream_file(str(cut), ".flac"))), whole)


def test_a_units_windows_load_in_any_order_and_from_a_resumed_plan(tmp_path):
    """Lever 1 loads flights ahead on several threads, and a resumed step loads only the windows not committed: each
    window loaded is the window the whole stream cuts, the object is read once, and a plan missing a unit's committed
    windows is refused (its layout would be guessed)."""
    import fsspec
    import soundfile as sf

    from batch_assets.ingest.manifest import build_manifest
    from batch_assets.ingest.prepare import prepare_flights
    from batch_assets.source.flight_audio import flight_source

    day = tmp_path / "day"
    day.mkdir()
    sf.write(day / "long.wav", 0.1 * np.random.default_rng(5).standard_normal(200 * SAMPLE_RATE).astype(np.float32),
             SAMPLE_RATE, subtype="FLOAT")
    fs = fsspec.filesystem("file")
    manifest, _ = build_manifest(fs, str(day), 7200.0, 1)
    spec = WindowSpec(60.0, 10.0)
    plan, _ = prepare_flights(manifest, budget_s=1800.0, max_units=8, windows=spec)
    expected = list(split_windows(stream_file(str(day / "long.wav"), ".wav"), spec))
    assert plan.height == len(expected) == 4
    resumed = plan.filter(pl.col("window") >= 1)  # window 0 committed by the killed run
    source = flight_source(plan, manifest, lambda uri: (fs, fs._strip_protocol(uri)), load=resumed)
    flights = dict(zip(resumed["window"], resumed["flight_id"], strict=True))
    loaded = {w: source.load(flights[w]) for w in (3, 1, 2)}
    for w, flight in loaded.items():
        assert np.array_equal(flight.audio, expected[w][1]), w
    assert sum(f.bytes_read for f in loaded.values()) == (day / "long.wav").stat().st_size
    assert source._streams[manifest["unit_id"][0]].stack is None  # closed after its last window taken
    with pytest.raises(ValueError, match="pass every window"):
        flight_source(resumed, manifest, lambda uri: (fs, uri))


def test_a_unit_found_longer_than_its_plan_is_measured_and_planned_again_in_windows(tmp_path):
    """Issue 64: a length the container only estimated, found short of the stream. Planned in windows (a 60 s
    estimate: 120 s of windows for 200 s) or whole (a 20 s estimate: 40 s, under a 60 s window), the unit is decoded to
    the end of its stream without being held whole and its length told (`measured`); the plan laid out again from
    it (`replanned`) has the windows the whole stream cuts, keeps the rows (and so the commits) of the windows that
    were already right, and loads them as the stream cuts them. A measurement of another version is ignored."""
    import fsspec
    import soundfile as sf

    from batch_assets.gpu.steps.resume import planned_flights
    from batch_assets.ingest.manifest import build_manifest
    from batch_assets.ingest.measured_lengths import MeasuredLength, replanned, valid_measurements, with_measured
    from batch_assets.ingest.prepare import prepare_flights
    from batch_assets.source.flight_audio import flight_source

    (tmp_path / "day").mkdir()
    sf.write(tmp_path / "day" / "long.wav", 0.1 * np.random.default_rng(5).standard_normal(200 * SAMPLE_RATE)
             .astype(np.float32), SAMPLE_RATE, subtype="FLOAT")
    fs = fsspec.filesystem("file")
    manifest, _ = build_manifest(fs, str(tmp_path / "day"), 7200.0, 1)
    uid, spec = manifest["unit_id"][0], WindowSpec(60.0, 10.0)
    expected = list(split_windows(stream_file(str(tmp_path / "day" / "long.wav"), ".wav"), spec))
    for estimate, last_kept in ((60.0, 1), (20.0, -1)):
        listed = manifest.with_columns(pl.lit(estimate).alias("duration_s"), pl.lit(True).alias("duration_estimated"))
        plan, flights = prepare_flights(listed, budget_s=1800.0, max_units=8, windows=spec)
        told: list[tuple] = []
        source = flight_source(plan, listed, lambda uri: (fs, fs._strip_protocol(uri)), spec=spec,
                               measured=lambda *args, told=told: told.append(args))
        pieces = [p for f in flights["flight_id"] for p in source.load(f).pieces.values()]
        assert told == [(uid, ObjectVersion.of_row(listed.row(0, named=True)).token(), 200 * SAMPLE_RATE)], told
        if estimate == 20.0:  # planned whole: not processed whole past a window, nor cut
            assert pieces[0].problem[0] == "failed" and "planned again in windows of 60 s" in pieces[0].problem[1]
        valid = valid_measurements(listed, {uid: MeasuredLength(uid, told[0][1], told[0][2])})
        assert valid == {uid: 200.0} and not valid_measurements(listed, {uid: MeasuredLength(uid, "other", 1)})
        again, again_flights = replanned(plan, flights, valid, spec)
        assert again.sort("window")["num_samples"].to_list() == [len(w) for _, w in expected]
        assert again_flights["audio_s"].sum() == again["num_samples"].sum() / SAMPLE_RATE
        before, after = (planned_flights(listed, p, f) for p, f in ((plan, flights), (again, again_flights)))
        kept = [f.flight_id for f in before if f in after]
        assert kept == [f.flight_id for f in before[: last_kept + 1]], (before, after)  # fingerprints unchanged
        resumed = flight_source(again, with_measured(listed, valid), lambda uri: (fs, fs._strip_protocol(uri)),
                                spec=spec)
        for w, flight_id in zip(again["window"], again["flight_id"], strict=True):
            assert np.array_equal(resumed.load(flight_id).audio, expected[w][1]), w
        replan, _ = prepare_flights(with_measured(listed, valid), budget_s=1800.0, max_units=8, windows=spec)
        assert replan["num_samples"].to_list() == again.sort("window")["num_samples"].to_list()  # the next plan


def _frame(schema: dict, rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([{k: row.get(k) for k in schema} for row in rows], schema=schema)


def test_stitching_puts_a_windowed_unit_back_on_one_clock_with_one_label_per_voice():
    """Two windows of 100 s overlapped by 20 s (cores 0-90 s and 90-150 s) whose local labels are swapped, between
    two units processed whole: every number below follows from the cores, by hand."""
    from batch_assets.gpu.outputs import tables
    from batch_assets.ingest.prepare import PLAN_SCHEMA
    from batch_assets.long_units.stitching import stitch

    a, b = np.eye(4)[0], np.eye(4)[1]  # two voices' centroids
    whole = {"unit_id": "s", "flight_id": "f0"}
    plan = _frame(PLAN_SCHEMA, [whole, {"unit_id": "u", "flight_id": "f1-w0000", "window": 0, "window_start_s": 0.0,
                                        "duration_s": 100.0},
                                {"unit_id": "u", "flight_id": "f1-w0001", "window": 1, "window_start_s": 80.0,
                                 "duration_s": 70.0}, {"unit_id": "t", "flight_id": "f2"}])
    w0, w1 = "u.w0000", "u.w0001"
    turns = [(w0, 0, 40, "SPEAKER_00"), (w0, 41, 99, "SPEAKER_01"), (w1, 0, 15, "SPEAKER_00"),
             (w1, 20, 70, "SPEAKER_01")]
    fragments = {
        "outcomes": _frame(tables.OUTCOMES_SCHEMA, [{"unit_id": u, "result_class": "transcribed", "duration_s": d}
                                                    for u, d in (("s", 5.0), (w0, 100.0), (w1, 70.0), ("t", 5.0))]),
        "speakers": _frame(tables.SPEAKERS_SCHEMA, [
            {"unit_id": "s", "speaker": "SPEAKER_00", "embedding": a.tolist(), "speech_s": 5.0},
            {"unit_id": w0, "speaker": "SPEAKER_00", "embedding": a.tolist(), "speech_s": 40.0,
             "segmentation": "reused"},
            {"unit_id": w0, "speaker": "SPEAKER_01", "embedding": b.tolist(), "speech_s": 58.0,
             "segmentation": "reused"},
            {"unit_id": w1, "speaker": "SPEAKER_00", "embedding": (b + 0.01).tolist(), "speech_s": 15.0},
            {"unit_id": w1, "speaker": "SPEAKER_01", "embedding": (a + 0.01).tolist(), "speech_s": 50.0}]),
        "turns": _frame(tables.TURNS_SCHEMA, [
            {"unit_id": u, "start_s": float(s), "end_s": float(e), "speaker": k, "exclusive": x}
            for x in (False, True) for u, s, e, k in turns]),
        "regions": _frame(tables.REGIONS_SCHEMA, [{"unit_id": u, "start_s": float(s), "end_s": float(e)}
                                                  for u, s, e, _ in turns]),
        "words": _frame(tables.WORDS_SCHEMA, [
            {"unit_id": "s", "word": "hello", "start_s": 1.0, "end_s": 2.0, "word_index": 0, "segment_index": 0},
            *({"unit_id": u, "word": w, "start_s": s, "end_s": s + 1, "speaker": k} for u, w, s, k in (
                (w0, "a", 1.0, "SPEAKER_00"), (w0, "b", 88.0, "SPEAKER_01"), (w0, "c", 91.0, "SPEAKER_01"),
                (w1, "b", 8.0, "SPEAKER_00"), (w1, "c", 11.0, "SPEAKER_00"), (w1, "d", 30.0, "SPEAKER_01")))]),
        "vad_units": _frame(tables.VAD_UNITS_SCHEMA, [
            {"unit_id": u, "flight_id": f, "num_chunks": n, "frames_per_chunk": 2, "local_speakers": 1,
             "chunk_duration_s": 10.0, "chunk_step_s": 1.0, "scores_uri": u}
            for u, f, n in (("s", "f0", 1), (w0, "f1-w0000", 91), (w1, "f1-w0001", 61), ("t", "f2", 1))]),
    }
    fragments["words"] = pl.concat([fragments["words"], fragments["words"].filter(pl.col("unit_id") == "s")
                                    .with_columns(pl.lit("t").alias("unit_id"))])
    arrays = {w0: np.arange(91.0), w1: 80 + np.arange(61.0), "s": np.zeros(1), "t": np.zeros(1)}  # chunk start times
    written = {}

    def write_scores(uid, chunks):
        written[uid] = np.load(io.BytesIO(b"".join(chunks)))
        return f"scores/{uid}"

    out = stitch(fragments, plan, write_scores,
                 read_array=lambda uri: np.repeat(arrays[uri][:, None, None], 2, axis=1).astype(np.float32))
    for name, frame in out.items():  # the units processed whole pass through, in place
        expected = [u for u in ("s", "u", "t") if u == "u" or u in fragments[name]["unit_id"]]
        assert frame["unit_id"].unique(maintain_order=True).to_list() == expected, name
        for other in ("s", "t"):
            assert frame.filter(pl.col("unit_id") == other).equals(fragments[name].filter(pl.col("unit_id") == other))
    turns_out = (out["turns"].filter(~pl.col("exclusive") & (pl.col("unit_id") == "u"))
                 .select("start_s", "end_s", "speaker"))
    assert turns_out.rows() == [(0.0, 40.0, "SPEAKER_00"), (41.0, 95.0, "SPEAKER_01"), (100.0, 150.0, "SPEAKER_00")]
    assert out["regions"].filter(pl.col("unit_id") == "u").select("start_s", "end_s").rows() == [
        (0.0, 40.0), (41.0, 95.0), (100.0, 150.0)]
    words = out["words"].filter(pl.col("unit_id") == "u")
    assert words.select("word", "start_s", "speaker", "word_index", "segment_index").rows() == [
        ("a", 1.0, "SPEAKER_00", 0, 0), ("b", 88.0, "SPEAKER_01", 1, 1), ("c", 91.0, "SPEAKER_01", 2, 1),
        ("d", 110.0, "SPEAKER_00", 3, 2)]
    unit = out["outcomes"].filter(pl.col("unit_id") == "u").row(0, named=True)
    assert (unit["duration_s"], unit["speech_s"], unit["num_speakers"], unit["num_words"], unit["text"]) == (
        150.0, 144.0, 2, 4, "a b c d")
    speakers = out["speakers"].filter(pl.col("unit_id") == "u")
    assert speakers.select("speaker", "speech_s").rows() == [("SPEAKER_00", 90.0), ("SPEAKER_01", 54.0)]
    assert np.allclose(speakers["embedding"][0].to_numpy(), (40 * a + 50 * (a + 0.01)) / 90)
    vad = out["vad_units"].filter(pl.col("unit_id") == "u").row(0, named=True)
    assert vad["num_chunks"] == 141 and vad["scores_uri"] == "scores/u"  # (150 - 10) / 1 + 1: the unit's own grid
    assert np.array_equal(written["u"][:, 0, 0], np.arange(141.0))


def _two_windows(first: str) -> tuple[dict, pl.DataFrame]:
    """A unit of two windows whose first is `first` (silent: VAD found nothing; failed: VAD raised) and whose second
    has one speaker saying one word."""
    from batch_assets.gpu.outputs import tables
    from batch_assets.ingest.prepare import PLAN_SCHEMA

    w0, w1 = "u.w0000", "u.w0001"
    plan = _frame(PLAN_SCHEMA, [{"unit_id": "u", "flight_id": f"f-w000{i}", "window": i, "window_start_s": 80.0 * i,
                                 "duration_s": 100.0 - 30 * i} for i in (0, 1)])
    vad = [{"unit_id": w, "flight_id": f"f-w000{i}", "num_chunks": 91 - 30 * i, "frames_per_chunk": 1,
            "local_speakers": 1, "chunk_duration_s": 10.0, "chunk_step_s": 1.0, "scores_uri": w}
           for i, w in enumerate((w0, w1))]
    outcome = {"silent": {"result_class": "silent", "reason": "no speech detected by VAD"},
               "failed": {"result_class": "failed", "reason": "RuntimeError: boom"}}[first]
    fragments = {
        "outcomes": _frame(tables.OUTCOMES_SCHEMA, [{"unit_id": w0, "duration_s": 100.0} | outcome,
                                                    {"unit_id": w1, "duration_s": 70.0,
                                                     "result_class": "transcribed"}]),
        "vad_units": _frame(tables.VAD_UNITS_SCHEMA, vad if first == "silent" else vad[1:]),
        "regions": _frame(tables.REGIONS_SCHEMA, [{"unit_id": w1, "start_s": 20.0, "end_s": 30.0}]),
        "turns": _frame(tables.TURNS_SCHEMA, [{"unit_id": w1, "start_s": 20.0, "end_s": 30.0, "speaker": "SPEAKER_00",
                                               "exclusive": x} for x in (False, True)]),
        "speakers": _frame(tables.SPEAKERS_SCHEMA, [{"unit_id": w1, "speaker": "SPEAKER_00", "speech_s": 10.0,
                                                     "embedding": [1.0, 0.0]}]),
        "words": _frame(tables.WORDS_SCHEMA, [{"unit_id": w1, "word": "yes", "start_s": 21.0, "end_s": 22.0,
                                               "speaker": "SPEAKER_00"}]),
    }
    return fragments, plan


def test_a_silent_window_is_part_of_its_unit_and_a_failed_one_fails_it_naming_the_window():
    from batch_assets.long_units.stitching import stitch

    def stitched(first: str) -> dict:
        fragments, plan = _two_windows(first)
        return stitch(fragments, plan, lambda uid, chunks: b"".join(chunks) and f"scores/{uid}",
                      read_array=lambda uri: np.zeros((91, 1, 1), dtype=np.float32))

    out = stitched("silent")  # the first 80 s say nothing: the unit is the second window's speech, on the unit clock
    assert out["outcomes"].select("result_class", "num_speakers", "num_words").row(0) == ("transcribed", 1, 1)
    assert out["words"].select("word", "start_s", "speaker").rows() == [("yes", 101.0, "SPEAKER_00")]
    assert out["turns"].filter(~pl.col("exclusive")).select("start_s", "end_s").rows() == [(100.0, 110.0)]
    fragments, plan = _two_windows("silent")  # the last window's note (the stream went on past it) is the unit's
    fragments["outcomes"] = fragments["outcomes"].with_columns(
        pl.when(pl.col("unit_id") == "u.w0001").then(pl.lit("the stream goes on")).otherwise("reason").alias("reason"))
    out = stitch(fragments, plan, lambda uid, chunks: b"".join(chunks) and f"scores/{uid}",
                 read_array=lambda uri: np.zeros((91, 1, 1), dtype=np.float32))
    assert out["outcomes"].select("result_class", "reason").row(0) == ("transcribed", "the stream goes on")
    short = "truncated: decoded 100.0 s of 150.0 s declared (50.0 s missing)"  # it ended inside its last window
    fragments["outcomes"] = fragments["outcomes"].with_columns(
        pl.when(pl.col("unit_id") == "u.w0001").then(pl.lit(short)).otherwise("reason").alias("reason"))
    out = stitch(fragments, plan, lambda uid, chunks: b"".join(chunks) and f"scores/{uid}",
                 read_array=lambda uri: np.zeros((91, 1, 1), dtype=np.float32))
    assert out["outcomes"].select("result_class", "reason", "num_words").row(0) == ("truncated", short, 1)
    out = stitched("failed")
    unit = out["outcomes"].row(0, named=True)
    assert unit["result_class"] == "failed" and unit["reason"] == "window 0 (0-100 s) of 2: RuntimeError: boom"
    assert all(out[name].is_empty() for name in out if name != "outcomes")


def test_a_unit_whose_stream_ends_before_its_last_window_keeps_the_windows_that_decoded():
    """Issue 64: a long unit whose decode ended before its last planned window was published `truncated` with no
    rows, though its first window was transcribed. Now it keeps that window's rows, as a whole unit cut short keeps
    its words, and its reason names the window not reached."""
    from batch_assets.long_units.stitching import stitch

    fragments, plan = _two_windows("silent")
    swap = {"u.w0000": "u.w0001", "u.w0001": "u.w0000"}  # the speech in the first window, the second not reached
    fragments = {name: frame.with_columns(pl.col("unit_id").replace(swap)) for name, frame in fragments.items()}
    missing = ("truncated: decoded 90.0 s of 150.0 s declared (60.0 s missing): window 1 of 2 planned from the "
               "listing was not reached")
    fragments["outcomes"] = fragments["outcomes"].with_columns(
        pl.when(pl.col("unit_id") == "u.w0001").then(pl.lit("truncated")).otherwise("result_class").alias(
            "result_class"),
        pl.when(pl.col("unit_id") == "u.w0001").then(pl.lit(missing)).otherwise("reason").alias("reason"))
    fragments = {name: frame.filter(pl.col("unit_id") != "u.w0001") if name != "outcomes" else frame
                 for name, frame in fragments.items()}
    def stitched(estimated: set[str]) -> dict:
        return stitch(fragments, plan, lambda uid, chunks: b"".join(chunks) and f"scores/{uid}",
                      read_array=lambda uri: np.zeros((91, 1, 1), dtype=np.float32), estimated=estimated)

    out = stitched(set())
    unit = out["outcomes"].row(0, named=True)
    assert (unit["result_class"], unit["num_words"], unit["text"]) == ("truncated", 1, "yes"), unit
    assert unit["reason"] == f"window 1 (80-150 s) of 2: {missing}"
    assert out["words"].select("word", "start_s").rows() == [("yes", 21.0)]
    # a length the listing only estimated (a live recording): the windows past the stream say nothing of the object
    unit = stitched({"u"})["outcomes"].row(0, named=True)
    assert (unit["result_class"], unit["reason"], unit["num_words"]) == ("transcribed", "", 1), unit


def _voices(rng, windows: list[list[int]], noise: float = 0.15):
    """Speakers of windows: `windows[w]` lists the true voices present in window w (each a local label)."""
    truth = np.linalg.qr(rng.normal(size=(16, 16)))[0][:5]  # orthogonal voices
    items, true = [], {}
    for w, present in enumerate(windows):
        for local, v in enumerate(present):
            label = f"SPEAKER_{local:02d}"
            items.append((w, label, truth[v] + noise * rng.normal(size=16) / 4, float(rng.uniform(20, 300))))
            true[w, label] = v
    return items, true


def test_speakers_are_linked_across_windows_and_a_voice_split_inside_a_window_is_joined():
    rng = np.random.default_rng(7)
    items, true = _voices(rng, [[0, 1, 2], [1, 2, 3], [3, 0], [2, 0, 1, 3]])
    voice = link_speakers(items)
    assert len(set(voice.values())) == 4
    for a in voice:  # the same voice <=> the same true voice
        for b in voice:
            assert (voice[a] == voice[b]) == (true[a] == true[b]), (a, b)
    # one voice that a window's clustering split in two (all but the same centroid) is one voice again
    split = [(0, "SPEAKER_00", np.ones(4), 10.0), (0, "SPEAKER_01", np.ones(4) * 1.01 + 0.01, 10.0),
             (0, "SPEAKER_02", -np.ones(4), 10.0)]
    voice = link_speakers(split)
    assert voice[0, "SPEAKER_00"] == voice[0, "SPEAKER_01"] != voice[0, "SPEAKER_02"]


def test_a_window_is_told_at_most_the_units_voices_and_a_windowed_unit_flies_alone():
    from batch_assets.ingest.flights import plan_flights
    from batch_assets.long_units.windows import window_hints

    assert window_hints(SpeakerHints(num_speakers=3)) == SpeakerHints(max_speakers=3)  # a window may hold fewer
    assert window_hints(SpeakerHints(min_speakers=2, max_speakers=5)) == SpeakerHints(max_speakers=5)
    assert window_hints(SpeakerHints(min_speakers=2)) == SpeakerHints()
    plan = plan_flights([("a", 10.0), ("long", 500.0), ("b", 10.0), ("c", 10.0)], budget_s=1800,
                        alone=frozenset({"long"}))
    assert [(p.flight_id, p.unit_id) for p in plan] == [("flight-0000", "a"), ("flight-0001", "long"),
                                                        ("flight-0002", "b"), ("flight-0002", "c")]


def test_the_guards_count_a_windowed_unit_once():
    """One long unit whose read failed in every window is that unit's problem: not a systemic fault of the day
    (the guards see the plan's units, not its windows)."""
    from batch_assets.ingest.prepare import PLAN_SCHEMA
    from batch_assets.orchestration.guards import systemic_problem, with_source_uris

    failed = {"unit_id": "long", "result_class": "fetch_failed", "reason": "storage kept failing"}
    plan = _frame(PLAN_SCHEMA, [failed | {"flight_id": f"flight-0000-w{w:04d}", "window": w} for w in range(3)])
    manifest = pl.DataFrame({"unit_id": ["long"], "source_uri": ["s3://b/2026-03-02/long.flac"],
                             "relative_key": ["long.flac"]})
    units = with_source_uris(plan, manifest)
    assert units.height == 1 and systemic_problem(units) is None


def test_hints_bound_the_linked_count():
    rng = np.random.default_rng(8)
    items, _ = _voices(rng, [[0, 1], [2, 3], [4, 0]], noise=0.0)
    assert len(set(link_speakers(items).values())) == 5
    assert len(set(link_speakers(items, hints=SpeakerHints(num_speakers=3)).values())) == 3  # past the threshold
    assert len(set(link_speakers(items, threshold=10.0, hints=SpeakerHints(min_speakers=4)).values())) == 4


# -- the real pipeline ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def long_source(tmp_path_factory):
    import soundfile as sf

    from batch_assets.long_units.long_audio import long_recording

    source = tmp_path_factory.mktemp("long-source")
    for key in SHORT_KEYS:
        (source / LONG_DAY / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_SOURCE / "2026-01-15" / key, source / LONG_DAY / key)
    audio, turns = long_recording(440.0, seed=23)
    (source / LONG_DAY / LONG_KEY).parent.mkdir(parents=True)
    sf.write(source / LONG_DAY / LONG_KEY, audio, SAMPLE_RATE)
    (source.parent / f"{source.name}-truth.json").write_text(json.dumps(turns))
    return source, turns


@pytest.fixture(scope="module")
def windowed_run(tmp_path_factory, lock_dir, long_source):
    resources = make_resources(tmp_path_factory.mktemp("windowed"), lock_dir, long_source[0])
    result = materialize_partition(resources, LONG_DAY, WINDOWED)
    assert result.success
    return resources["storage"]


@pytest.mark.e2e
def test_a_unit_longer_than_the_window_keeps_one_label_per_voice(windowed_run, long_source):
    storage, turns = windowed_run, long_source[1]
    plan = storage.read_parquet("prepared_flights", LONG_DAY, "plan").filter(pl.col("unit_id") == LONG_ID)
    units = (storage.read_parquet("transcripts", LONG_DAY, "units").filter(pl.col("unit_id") == LONG_ID)
             .row(0, named=True))
    windows = 1 + int(np.ceil((units["duration_s"] - 120) / 110))
    assert windows >= 4 and plan["window"].to_list() == list(range(windows))
    assert plan["flight_id"].n_unique() == windows  # a flight per window
    assert units["result_class"] == "transcribed" and units["duration_s"] == pytest.approx(plan["window_start_s"][-1]
                                                                                           + plan["duration_s"][-1])
    words = storage.read_parquet("transcripts", LONG_DAY, "words").filter(pl.col("unit_id") == LONG_ID)
    assert words["word_index"].to_list() == list(range(len(words)))
    assert (words["start_s"].diff().drop_nulls() >= 0).all()  # one clock: each window's words shifted, none twice
    labels_of = collections.defaultdict(collections.Counter)  # true voice -> the labels its words got
    starts = np.array([t[0] for t in turns])
    for row in words.iter_rows(named=True):
        middle = (row["start_s"] + row["end_s"]) / 2
        i = int(np.searchsorted(starts, middle, side="right")) - 1
        if i >= 0 and turns[i][0] <= middle <= turns[i][1]:
            labels_of[turns[i][2]][row["speaker"]] += 1
    assert sorted(labels_of) == ["alice", "bob", "carol", "dave"]
    main = {voice: counts.most_common(1)[0][0] for voice, counts in labels_of.items()}
    assert len(set(main.values())) == 4, main  # four voices, four labels
    for voice, counts in labels_of.items():  # and each voice keeps its label through every window
        assert counts[main[voice]] / sum(counts.values()) >= 0.95, (voice, counts)
    speakers = storage.read_parquet("diarization", LONG_DAY, "speakers").filter(pl.col("unit_id") == LONG_ID)
    assert sorted(speakers["speaker"]) == sorted(main.values()) == [f"SPEAKER_{i:02d}" for i in range(4)]
    assert units["num_speakers"] == 4
    turns_table = storage.read_parquet("diarization", LONG_DAY, "turns").filter(pl.col("unit_id") == LONG_ID)
    for (_, _), group in turns_table.group_by("exclusive", "speaker"):
        assert (group["start_s"][1:] >= group["end_s"][:-1]).all()  # a voice's turns do not overlap themselves
    vad = storage.read_parquet("vad_scores", LONG_DAY, "units").filter(pl.col("unit_id") == LONG_ID).row(0, named=True)
    scores = storage.read_array(vad["scores_uri"])  # the windows' cores on the unit's own chunk grid
    assert scores.shape == (vad["num_chunks"], vad["frames_per_chunk"], vad["local_speakers"])
    assert vad["num_chunks"] == int(np.ceil((units["duration_s"] - vad["chunk_duration_s"]) / vad["chunk_step_s"])) + 1


@pytest.mark.e2e
def test_units_shorter_than_the_window_get_the_rows_they_always_got(windowed_run, flights_of_one):
    """Beside a windowed unit, the short units' rows in all seven tables are exactly the sample run's with the same
    flights (a unit in a flight of its own: a windowed unit flies alone, so its neighbours do too here; which units
    share a flight moves ASR's last bits, windows or not)."""
    mine, theirs = tables_of(windowed_run, LONG_DAY), tables_of(flights_of_one)
    short_ids = [k.replace("/", "__") for k in SHORT_KEYS]
    for key in TABLES:
        drop = [c for c in ("flight_id", "scores_uri", "source_uri") if c in mine[key].columns]
        a = mine[key].filter(pl.col("unit_id").is_in(short_ids)).drop(drop)
        b = theirs[key].filter(pl.col("unit_id").is_in(short_ids)).drop(drop)
        assert len(a) and a.equals(b), key


@pytest.mark.e2e
def test_a_kill_mid_unit_resumes_from_the_last_committed_window(tmp_path_factory, long_source, windowed_run):
    """A windowed unit's run killed for real mid-unit (its process, the steps in it) and its re-execution."""
    deployment = deployments.local(tmp_path_factory.mktemp("long-kill"), long_source[0])
    work = deployment.storage.filesystem(deployment.storage.url(f"gpu_work/{LONG_DAY}"))[1]

    def commits() -> list[str]:
        return sorted(p.name for p in pathlib.Path(work).rglob("*.commit.json"))

    dead = deployment.kill_when(lambda: sum("-w" in c for c in commits()) >= 2, partition=LONG_DAY, run_config=WINDOWED,
                                in_process=True)
    committed = commits()
    windows_done = [c for c in committed if "-w" in c]
    assert 2 <= len(windows_done) < 4, committed  # killed inside the long unit
    answer = deployment.run(reexecute_from=dead)
    assert answer["success"], answer["log"].read_text()[-5000:]
    with deployment.instance() as instance:
        [record] = [r for r in instance.fetch_materializations(
            dg.AssetKey("transcripts"), limit=5).records if r.run_id == answer["run_id"]]
        logs = "\n".join(e.user_message for e in instance.all_logs(answer["run_id"]))
    assert record.asset_materialization.metadata["resumed_flights"].value == len(committed), logs[-3000:]
    assert f"{len(committed)} flight(s) already committed" in logs
    assert_same_results(tables_of(windowed_run, LONG_DAY), tables_of(deployment.storage, LONG_DAY))
    print(f"killed after {len(windows_done)} of 4 windows committed; re-executed in {answer['wall_s']:.1f} s")


@pytest.mark.e2e
def test_rerunning_a_windowed_unit_gives_its_rows_again_and_keeps_the_others(windowed_run, lock_dir):
    """An analyst's `units` rerun of the long unit: its windows are processed again and stitched into the same rows;
    the other units' rows are kept as they were (runs last here: it rewrites the shared run's tables)."""
    from batch_assets.definitions import transcripts_checks
    from batch_assets.gpu.assets import gpu_section

    before = tables_of(windowed_run, LONG_DAY)
    resources = make_resources(pathlib.Path(windowed_run.storage_url), lock_dir, pathlib.Path(windowed_run.source_url))
    result = dg.materialize([gpu_section, *transcripts_checks], partition_key=LONG_DAY, resources=resources,
                            instance=dg.DagsterInstance.ephemeral(),
                            run_config={"ops": {"gpu_section": {"config": {"units": [LONG_KEY]}}}})
    assert result.success
    assert_arrays_load(resources["storage"])
    assert_same_results(before, tables_of(windowed_run, LONG_DAY))


def test_two_units_of_one_flight_found_longer_both_get_their_windows_beside_it():
    """Two estimated units planned whole in one flight, both measured past a window: each gets its windows, right
    after the flight that held them (a long unit's windows in one shard), and the flight keeps its third unit; one
    measured past the safety limit is not planned again."""
    from batch_assets.ingest.measured_lengths import replanned
    from batch_assets.ingest.prepare import prepare_flights

    manifest = pl.DataFrame({"unit_id": ["a", "b", "c", "d"], "duration_s": [20.0, 10.0, 25.0, 400.0],
                             "result_class": ["ok"] * 4, "duration_estimated": [True, False, True, False]})
    spec = WindowSpec(60.0, 10.0)
    plan, flights = prepare_flights(manifest, budget_s=600.0, max_units=3, windows=spec)
    again, again_flights = replanned(plan, flights, {"a": 130.0, "c": 75.0, "b": 200_000.0}, spec)
    assert again_flights["flight_id"].to_list()[:6] == [
        "flight-0000", "flight-0000-u00-w0000", "flight-0000-u00-w0001", "flight-0000-u00-w0002",
        "flight-0000-u02-w0000", "flight-0000-u02-w0001"], again_flights
    assert again.filter(pl.col("flight_id") == "flight-0000")["unit_id"].to_list() == ["b"]
    assert set(again["flight_id"]) == set(again_flights["flight_id"])


@pytest.mark.e2e
def test_a_piped_recording_longer_than_its_estimate_is_windowed_in_the_run_not_cut(tmp_path, lock_dir):
    """Issue 64: a FLAC written to a pipe (no length in its header) of 150 s, 100 of them digital silence: its size
    says about 53 s, so it is planned whole at twice that (106 s, under the 120 s window). The shard step decodes it
    to the end without holding it past a window, records its length, and the run's leftover step processes it in the
    two windows its stream cuts; the assembly stitches them: the whole recording, transcribed, on one clock."""
    import subprocess

    from batch_assets.ingest.manifest import read_manifest
    from batch_assets.ingest.measured_lengths import current_plan
    from batch_assets.source.ffmpeg import ffmpeg_exe

    key, day = "hearings/piped.flac", tmp_path / "source" / LONG_DAY
    (day / "hearings").mkdir(parents=True)
    with open(day / key, "wb") as piped:
        subprocess.run([ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-i", str(SAMPLE_SOURCE / "2026-01-15" /
                        SHORT_KEYS[0]), "-af", "apad=pad_dur=100", "-ar", "16000", "-c:a", "flac", "-f", "flac",
                        "pipe:1"], stdout=piped, check=True)
    resources = make_resources(tmp_path / "storage", lock_dir, tmp_path / "source")
    result = materialize_partition(resources, LONG_DAY, WINDOWED)
    assert result.success
    storage = resources["storage"]
    listed = read_manifest(storage, LONG_DAY).row(0, named=True)
    prepared = storage.read_parquet("prepared_flights", LONG_DAY, "plan")
    assert listed["duration_estimated"] and 40 < listed["duration_s"] < 60 and prepared["window"].is_null().all()
    current = current_plan(storage, LONG_DAY, read_manifest(storage, LONG_DAY))
    assert current.plan["window"].to_list() == [0, 1] and current.plan["window_start_s"].to_list() == [0.0, 110.0]
    assert any("gpu_leftover" in e.step_key for e in result.all_events if e.is_step_success)
    unit = storage.read_parquet("transcripts", LONG_DAY, "units").row(0, named=True)
    assert unit["result_class"] == "transcribed" and not unit["reason"], unit
    assert unit["duration_s"] == pytest.approx(149.79, abs=0.05), unit
    words = storage.read_parquet("transcripts", LONG_DAY, "words")
    assert len(words) > 20 and (words["start_s"].diff().drop_nulls() >= 0).all() and words["end_s"].max() < 55
