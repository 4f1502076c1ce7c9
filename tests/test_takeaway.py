"""What analysts take away: exports read by independent parsers, segments, published tables, speaker hints, docs.

The exports are parsed with libraries that know nothing of this project (`srt`, `webvtt-py`, pyannote's RTTM
loader) and matched to the tables of the shared sample run; the speaker hints run through a real Dagster run
with real sidecars and the real (builtin) pyannote pipeline.
"""

import html
import io
import json
import pathlib
import re
import subprocess
import sys

import dagster as dg
import polars as pl
import pyarrow.parquet as pq
import pytest
import srt
import webvtt
from pyannote.database.util import load_rttm

from batch_assets.exports.assets import ASSET
from batch_assets.exports.formats import FORMATS
from batch_assets.gpu.outputs.tables import TABLE_SCHEMAS
from batch_assets.storage.resource import SAMPLE_PARTITION

from .conftest import make_resources, materialize_partition
from .partition_sources import make_source

P = SAMPLE_PARTITION
PREFIX = re.compile(r"^\[([A-Za-z0-9_]+|SPEAKER_\?)\] ")


def _tables(storage) -> dict[str, pl.DataFrame]:
    tables = {name: storage.read_parquet("transcripts", P, name) for name in ("units", "segments", "words")}
    return tables | {"turns": storage.read_parquet("diarization", P, "turns")}


def _export_path(storage, name: str) -> pathlib.Path:
    return pathlib.Path(storage.output_url(ASSET, P, name))


def _exported(tables) -> list[str]:
    return tables["units"].filter(pl.col("speech_s").is_not_null())["unit_id"].to_list()


@pytest.mark.e2e
def test_srt_and_webvtt_parse_back_to_the_words_and_speakers(sample_run):
    _, storage = sample_run
    tables = _tables(storage)
    exported = _exported(tables)
    assert len(exported) == 5 and tables["words"].height > 300  # the sample's five units, the silent one included
    for uid in exported:
        words = tables["words"].filter(pl.col("unit_id") == uid).sort("word_index")
        starts = {round(s * 1000) for s in words["start_s"]}
        segment_speaker = dict(tables["segments"].filter(pl.col("unit_id") == uid)
                               .select("segment_index", "speaker").iter_rows())
        cues = list(srt.parse(_export_path(storage, f"{uid}.srt").read_text()))
        said, speakers = [], []
        for cue in cues:
            lines = cue.content.split("\n")
            assert 1 <= len(lines) <= 2 and all(len(line) <= 42 or " " not in line for line in lines), cue.content
            assert (cue.end - cue.start).total_seconds() <= 7.0 + 1e-9, cue
            speaker = PREFIX.match(lines[0]).group(1)
            text = " ".join(lines)[len(speaker) + 3:].split()
            assert round(cue.start.total_seconds() * 1000) in starts  # a cue starts where a word starts
            said.extend(text)
            speakers.extend([speaker] * len(text))
        assert said == words["word"].to_list(), uid
        expected = [segment_speaker[s] or "SPEAKER_?" for s in words["segment_index"]]
        assert speakers == expected, uid
        captions = webvtt.from_buffer(io.StringIO(_export_path(storage, f"{uid}.vtt").read_text()))
        assert [(c.start_time.in_milliseconds(), c.end_time.in_milliseconds()) for c in captions] == [
            (round(c.start.total_seconds() * 1000), round(c.end.total_seconds() * 1000)) for c in cues]
        assert [c.voice for c in captions] == [PREFIX.match(c.content).group(1) for c in cues]
        assert " ".join(html.unescape(" ".join(c.text for c in captions)).split()) == " ".join(words["word"]), uid


@pytest.mark.e2e
def test_json_txt_and_rttm_match_the_tables(sample_run, tmp_path):
    _, storage = sample_run
    tables = _tables(storage)
    for uid in _exported(tables):
        segments = tables["segments"].filter(pl.col("unit_id") == uid).sort("segment_index")
        words = tables["words"].filter(pl.col("unit_id") == uid).sort("word_index")
        doc = json.loads(_export_path(storage, f"{uid}.json").read_text())  # WhisperX's shape
        assert [(s["start"], s["end"], s["text"], s.get("speaker")) for s in doc["segments"]] == [
            (r["start_s"], r["end_s"], r["text"], r["speaker"]) for r in segments.iter_rows(named=True)]
        flat = [w for s in doc["segments"] for w in s["words"]]
        assert flat == doc["word_segments"]
        assert [(w["word"], w["start"], w["end"], w.get("speaker"), w.get("score")) for w in flat] == [
            (r["word"], r["start_s"], r["end_s"], r["speaker"], r["score"]) for r in words.iter_rows(named=True)]
        lines = _export_path(storage, f"{uid}.txt").read_text().splitlines()
        assert len(lines) == segments.height
        for line, row in zip(lines, segments.iter_rows(named=True), strict=True):
            assert line.startswith(f"[{row['speaker'] or 'SPEAKER_?'} ") and line.endswith(f"]: {row['text']}"), line
        turns = (tables["turns"].filter((pl.col("unit_id") == uid) & ~pl.col("exclusive"))
                 .sort("start_s", "end_s", "speaker"))
        rttm = _export_path(storage, f"{uid}.rttm")
        if not turns.height:
            assert rttm.read_text() == ""
            continue
        [(uri, annotation)] = load_rttm(str(rttm)).items()
        assert uri == uid and set(annotation.labels()) == set(turns["speaker"])
        loaded = sorted((round(s.start, 3), round(s.end, 3), label)
                        for s, _, label in annotation.itertracks(yield_label=True))
        assert loaded == sorted((r["start_s"], r["end_s"], r["speaker"]) for r in turns.iter_rows(named=True))
    assert sum(1 for r in tables["words"].iter_rows(named=True) if r["score"] is not None) == tables["words"].height
    assert 0.0 <= tables["words"]["score"].min() <= tables["words"]["score"].max() <= 1.0


@pytest.mark.e2e
def test_export_command_writes_the_assets_files(sample_run, tmp_path):
    _, storage = sample_run
    env = {"BATCH_ASSETS_STORAGE_URL": storage.storage_url, "PYTHONWARNINGS": "ignore"}
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "batch_assets.cli", "export", "--partition", P, "--format", "all",
                           "--out", str(out)], env=_env(env), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 5 * len(FORMATS)
    for name in written:
        assert (out / name).read_bytes() == _export_path(storage, name).read_bytes(), name
    one = subprocess.run([sys.executable, "-m", "batch_assets.cli", "export", "--partition", P, "--unit",
                          "meetings/planning.mp3", "--format", "rttm", "--out", str(tmp_path / "one")], env=_env(env),
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0 and [p.name for p in (tmp_path / "one").iterdir()] == ["meetings__planning.mp3.rttm"]
    bad = subprocess.run([sys.executable, "-m", "batch_assets.cli", "export", "--partition", P, "--unit", "nope.wav",
                          "--out", str(tmp_path / "bad")], env=_env(env), capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "unit 'nope.wav' is not in this partition" in bad.stderr


def _env(extra: dict) -> dict:
    import os

    return os.environ | extra


@pytest.mark.e2e
def test_segments_are_the_words_speaker_turns(sample_run):
    _, storage = sample_run
    segments, words = (storage.read_parquet("transcripts", P, "segments"),
                       storage.read_parquet("transcripts", P, "words"))
    for (uid,), unit_words in words.partition_by("unit_id", as_dict=True).items():
        unit_words = unit_words.sort("word_index")
        indices = unit_words["segment_index"].to_list()
        assert indices[0] == 0 and all(b - a in (0, 1) for a, b in zip(indices, indices[1:], strict=False))
        unit_segments = segments.filter(pl.col("unit_id") == uid).sort("segment_index")
        assert unit_segments["segment_index"].to_list() == sorted(set(indices))
        spk = unit_segments["speaker"].to_list()
        assert all(a != b for a, b in zip(spk, spk[1:], strict=False)), uid  # a turn ends where the speaker changes
        for row in unit_segments.iter_rows(named=True):
            mine = unit_words.filter(pl.col("segment_index") == row["segment_index"])
            assert set(mine["speaker"].to_list()) == {row["speaker"]}
            assert ((row["start_s"], row["end_s"], row["num_words"])
                    == (mine["start_s"][0], mine["end_s"][-1], mine.height))
            assert row["text"] == " ".join(mine["word"])
    assert segments["num_words"].sum() == words.height


@pytest.mark.e2e
def test_published_tables_carry_day_descriptions_ms_times_and_null_reasons(sample_run):
    _, storage = sample_run
    units = pl.read_parquet(storage.output_url("transcripts", P, "units.parquet"))
    assert units["reason"].null_count() == 4 and "" not in units["reason"].to_list()  # only the silent unit says why
    for asset, name in [*TABLE_SCHEMAS, ("fetched_audio", "manifest"), ("prepared_flights", "plan"), (ASSET, "files")]:
        path = storage.output_url(asset, P, f"{name}.parquet")
        frame = pl.read_parquet(path)
        assert frame.columns[0] == "day" and frame.schema["day"] == pl.Date and set(frame["day"].cast(str)) <= {P}
        schema = pq.read_schema(path)
        missing = [f.name for f in schema if not (f.metadata or {}).get(b"description")]
        assert not missing, (asset, name, missing)
        for column in ("start_s", "end_s", "duration_s", "speech_s"):
            if column in frame.columns and frame[column].dtype == pl.Float64:
                values = frame[column].drop_nulls()
                assert (values - values.round(3)).abs().max() in (None, 0.0), (asset, name, column)
    days = pl.scan_parquet(storage.output_url("transcripts", "*", "words.parquet")).select("day").unique().collect()
    assert days["day"].cast(str).to_list() == [P]


@pytest.mark.e2e
def test_speaker_hints_reach_the_pipeline_and_a_bad_sidecar_is_a_reason(tmp_path, lock_dir):
    """interview.ogg has three voices (the shared run finds 3); forced to 2 by the run config, it has 2. planning.mp3's
    sidecar asks for one speaker; support_call.flac's sidecar is bad, so the run's hint applies to it, with a reason."""
    day = "2026-02-02"
    source = make_source(tmp_path / "source", {day: ["calls/2026/interview.ogg", "meetings/planning.mp3",
                                                      "calls/2026/support_call.flac", "silence/empty_room.wav"]})
    folder = source / day
    (folder / "meetings" / "planning.mp3.json").write_text('{"num_speakers": 1}')
    (folder / "calls" / "2026" / "support_call.flac.json").write_text('{"min_speakers": 3, "max_speakers": 2}')
    (folder / "calls" / "2026" / "notes.txt").write_text("not audio")
    resources = make_resources(tmp_path / "storage", lock_dir, source)
    result = materialize_partition(resources, day, run_config={"ops": {"gpu_section": {"config": {"num_speakers": 2}}}})
    assert result.success
    storage = resources["storage"]
    units = {r["unit_id"]: r for r in storage.read_parquet("transcripts", day, "units").iter_rows(named=True)}
    interview, planning, call = (units[u] for u in ("calls__2026__interview.ogg", "meetings__planning.mp3",
                                                    "calls__2026__support_call.flac"))
    assert (interview["num_speakers"], interview["hint_num_speakers"], interview["hint_source"]) == (2, 2, "run config")
    assert (planning["num_speakers"], planning["hint_num_speakers"], planning["hint_source"]) == (1, 1, "sidecar")
    assert call["result_class"] == "transcribed" and call["hint_source"] == "run config"
    silent = units["silence__empty_room.wav"]  # no speech: diarization never ran, so no hint was applied
    assert silent["result_class"] == "silent" and (silent["hint_num_speakers"], silent["hint_source"]) == (None, None)
    assert ("speaker hints ignored: 'calls/2026/support_call.flac.json': min_speakers 3 is more than max_speakers 2"
            in call["reason"])
    speakers = storage.read_parquet("diarization", day, "speakers")
    assert speakers.filter(pl.col("unit_id") == "calls__2026__interview.ogg").height == 2
    skipped = {r["relative_key"]: r["reason"]
               for r in storage.read_parquet("fetched_audio", day, "skipped").iter_rows(named=True)}
    assert (skipped["meetings/planning.mp3.json"]
            == "sidecar: speaker-count hints, language and channel choices for 'meetings/planning.mp3'")
    assert skipped["calls/2026/support_call.flac.json"].startswith("sidecar:")
    assert skipped["calls/2026/notes.txt"].startswith("extension '.txt'")


@pytest.mark.e2e
@pytest.mark.parametrize("config, step, message", [
    ({"num_speakers": 2, "max_speakers": 3}, "gpu_section.plan_gpu_shards",
     "give num_speakers, or min_speakers/max_speakers, not both"),
    ({"language": "fr"}, "fetched_audio",
     "ops.gpu_section.config.language: no ASR model for language 'fr'; configured: de, en, es, ja"),
    ({"language": "french"}, "fetched_audio", "'french' is not an ISO 639-1 language code"),
], ids=["hints", "language without a model", "not a language"])
def test_a_bad_run_config_fails_at_once_naming_it(tmp_path, lock_dir, config, step, message):
    """Contradictory hints fail the plan step (no GPU step starts); a language no ASR model hears fails the run's
    first step, before anything is fetched."""
    source = make_source(tmp_path / "source", {P: ["meetings/planning.mp3"]})
    resources = make_resources(tmp_path / "storage", lock_dir, source)
    result = materialize_partition(resources, run_config={"ops": {"gpu_section": {"config": config}}},
                                   raise_on_error=False)
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    assert failure.step_key == step and message in str(failure.event_specific_data.error)
    assert not [e for e in result.all_events if e.step_key and e.step_key.startswith("gpu_section.gpu_shard[")]
    if step == "fetched_audio":
        assert not (tmp_path / "storage" / "fetched_audio").exists()  # nothing fetched, nothing written


def test_a_bad_sidecar_says_what_is_wrong_with_it():
    import pytest

    from batch_assets.ingest.speaker_hints import MAX_SIDECAR_BYTES, HintError, SpeakerHints, parse_sidecar

    assert parse_sidecar(b'{"num_speakers": 2}', "a.wav.json") == SpeakerHints(num_speakers=2)
    assert parse_sidecar(b'{"min_speakers": 2, "max_speakers": 4}', "a.wav.json").pipeline_kwargs() == {
        "min_speakers": 2, "max_speakers": 4}
    for data, message in ((b"{num_speakers: 2}", "not JSON"), (b"[2]", "a JSON object is expected"),
                          (b'{"speakers": 2}', "unknown key(s) 'speakers'"),
                          (b'{"num_speakers": 0}', "positive integer"), (b'{"num_speakers": true}', "positive integer"),
                          (b'{"num_speakers": "2"}', "positive integer"),
                          (b'{"num_speakers": 2, "max_speakers": 3}', "not both"),
                          (b" " * (MAX_SIDECAR_BYTES + 1), "more than a sidecar's")):
        with pytest.raises(HintError, match=re.escape(message)) as raised:
            parse_sidecar(data, "calls/a.wav.json")
        assert str(raised.value).startswith("calls/a.wav.json: "), raised.value
