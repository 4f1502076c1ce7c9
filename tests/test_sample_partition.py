"""The sample partition end to end through `dg.materialize`: tables, schemas and row counts."""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import polars as pl
import pytest

from batch_assets.gpu.outputs.tables import (
    REGIONS_SCHEMA,
    SPEAKERS_SCHEMA,
    TRANSCRIPT_UNITS_SCHEMA,
    TURNS_SCHEMA,
    VAD_UNITS_SCHEMA,
    WORDS_SCHEMA,
)
from batch_assets.ingest.manifest import MANIFEST_SCHEMA
from batch_assets.ingest.prepare import FLIGHTS_SCHEMA, PLAN_SCHEMA
from batch_assets.schema.results import ResultClass
from batch_assets.storage.resource import REPO_ROOT, SAMPLE_PARTITION

from .conftest import SAMPLE_SOURCE

pytestmark = pytest.mark.e2e  # every test here runs the job, a server or a deployment

P = SAMPLE_PARTITION
TRUTH = json.loads((REPO_ROOT / "sample_data" / "truth" / f"{P}.json").read_text())


def _table(storage, asset, name) -> pl.DataFrame:
    return storage.read_parquet(asset, P, name)


def test_all_six_assets_materialized(sample_run):
    result, _ = sample_run
    keys = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert keys == {"fetched_audio", "prepared_flights", "vad_scores", "diarization", "transcripts",
                    "transcript_exports"}


def test_manifest_lists_every_audio_file_once(sample_run):
    _, storage = sample_run
    manifest = _table(storage, "fetched_audio", "manifest")
    assert dict(manifest.schema) == MANIFEST_SCHEMA
    on_disk = sorted(str(p.relative_to(SAMPLE_SOURCE / P)) for p in (SAMPLE_SOURCE / P).rglob("*") if p.is_file())
    assert sorted(manifest["relative_key"]) == on_disk == sorted(TRUTH)
    assert manifest["unit_id"].n_unique() == len(manifest)
    assert set(manifest["result_class"]) == {"ok"}
    for row in manifest.iter_rows(named=True):
        assert abs(row["duration_s"] - TRUTH[row["relative_key"]]["duration_s"]) < 0.1
        assert row["bytes"] > 0 and row["mtime_ns"] > 0 and row["etag"] is None
        assert 0 < row["probe_bytes"] <= 2 * 65536  # a head and a tail read at most: no object read whole here
    units = _table(storage, "transcripts", "units")
    for row in units.join(manifest, on="unit_id").iter_rows(named=True):  # the GPU step read each object once
        assert row["sha256"] == hashlib.sha256((SAMPLE_SOURCE / P / row["relative_key"]).read_bytes()).hexdigest()


def test_flights_hold_every_ok_unit_within_budget(sample_run):
    _, storage = sample_run
    manifest = _table(storage, "fetched_audio", "manifest")
    plan = _table(storage, "prepared_flights", "plan")
    flights = _table(storage, "prepared_flights", "flights")
    assert dict(plan.schema) == PLAN_SCHEMA and dict(flights.schema) == FLIGHTS_SCHEMA
    assert sorted(plan["unit_id"]) == sorted(manifest["unit_id"])
    assert (flights["audio_s"] <= 1800.0).all()
    assert not pathlib.Path(storage.storage_url, "prepared_flights", P, "audio").exists()  # a plan: no audio
    decoded = dict(_table(storage, "transcripts", "units").select("unit_id", "duration_s").iter_rows())
    for flight in flights.iter_rows(named=True):
        units = plan.filter(pl.col("flight_id") == flight["flight_id"]).sort("position")
        assert units["num_samples"].sum() == round(flight["audio_s"] * 16000)
        offsets = units["offset_samples"].to_list()
        assert offsets == [0, *np.cumsum(units["num_samples"].to_list())[:-1].tolist()]
        for unit in units.iter_rows(named=True):  # planned from the listing; decoded as long (16 kHz keeps length)
            assert abs(unit["duration_s"] - decoded[unit["unit_id"]]) < 0.05


def test_vad_scores_and_regions(sample_run):
    _, storage = sample_run
    units = _table(storage, "vad_scores", "units")
    regions = _table(storage, "vad_scores", "regions")
    assert dict(units.schema) == VAD_UNITS_SCHEMA and dict(regions.schema) == REGIONS_SCHEMA
    assert len(units) == len(TRUTH)
    for row in units.iter_rows(named=True):
        scores = storage.read_array(row["scores_uri"])
        assert scores.shape == (row["num_chunks"], row["frames_per_chunk"], row["local_speakers"])
        unit_regions = regions.filter(pl.col("unit_id") == row["unit_id"])
        assert (unit_regions["end_s"] <= row["duration_s"] + 1e-6).all()  # published times are in ms, each rounded once
        ms = 1e-3 * (2 * len(unit_regions) + 1)
        assert (abs(float(unit_regions["end_s"].sum() - unit_regions["start_s"].sum()) - row["speech_s"]) < ms
                if len(unit_regions) else row["speech_s"] == 0)


def test_silent_unit_is_silent_and_speech_units_are_transcribed(sample_run):
    _, storage = sample_run
    manifest = _table(storage, "fetched_audio", "manifest")
    units = _table(storage, "transcripts", "units")
    words = _table(storage, "transcripts", "words")
    assert dict(units.schema) == TRANSCRIPT_UNITS_SCHEMA and dict(words.schema) == WORDS_SCHEMA
    assert sorted(units["unit_id"]) == sorted(manifest["unit_id"])  # every unit, exactly once
    classes = dict(zip(manifest["relative_key"], manifest["unit_id"], strict=True))
    by_unit = {r["unit_id"]: r for r in units.iter_rows(named=True)}
    for rel, truth in TRUTH.items():
        row = by_unit[classes[rel]]
        if truth["turns"]:
            assert row["result_class"] == ResultClass.TRANSCRIBED, row
            assert row["speech_s"] > 0.5 * sum(t["end_s"] - t["start_s"] for t in truth["turns"])
        else:
            assert row["result_class"] == ResultClass.SILENT, row
            assert row["num_words"] == 0 and row["text"] == ""
            assert words.filter(pl.col("unit_id") == row["unit_id"]).is_empty()


def test_words_are_timed_inside_their_unit_and_attributed_to_a_speaker(sample_run):
    _, storage = sample_run
    units = _table(storage, "transcripts", "units")
    words = _table(storage, "transcripts", "words")
    turns = _table(storage, "diarization", "turns")
    speakers = _table(storage, "diarization", "speakers")
    assert dict(turns.schema) == TURNS_SCHEMA and dict(speakers.schema) == SPEAKERS_SCHEMA
    joined = words.join(units.select("unit_id", "duration_s", "num_words"), on="unit_id")
    assert (joined["start_s"] >= 0).all() and (joined["end_s"] <= joined["duration_s"] + 1e-6).all()
    assert (joined["start_s"] <= joined["end_s"]).all()
    counts = words.group_by("unit_id").len()
    for row in counts.join(units, on="unit_id").iter_rows(named=True):
        assert row["len"] == row["num_words"]
    known = {(r["unit_id"], r["speaker"]) for r in turns.iter_rows(named=True)}
    for row in words.iter_rows(named=True):
        assert (row["unit_id"], row["speaker"]) in known
    assert not speakers.is_empty() and (speakers["speech_s"] > 0).all()


def test_rerun_replaces_outputs_without_duplicates(sample_run, lock_dir):
    from .conftest import make_resources, materialize_partition

    _, storage = sample_run
    before = {name: _table(storage, "transcripts", name) for name in ("units", "words")}
    stale = storage.output_url("transcripts", P, "stale.parquet")
    storage.write_bytes(stale, b"left over from an older version")
    resources = make_resources(__import__("pathlib").Path(storage.storage_url), lock_dir)
    assert materialize_partition(resources).success
    fs, path = storage.filesystem(stale)
    assert not fs.exists(path)
    for name, frame in before.items():
        assert _table(storage, "transcripts", name).equals(frame)


def _metadata(result, asset: str) -> dict:
    event = next(e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset)
    return dict(event.materialization.metadata)


def test_the_ui_shows_speaker_attributed_turns_and_what_happened_to_each_unit(sample_run):
    import dagster as dg

    result, storage = sample_run
    meta = _metadata(result, "transcripts")
    transcript = meta["transcript"].value
    units, words = _table(storage, "transcripts", "units"), _table(storage, "transcripts", "words")
    for row in units.iter_rows(named=True):
        assert f"**{row['unit_id']} ({row['result_class']}" in transcript
    # every turn line is SPEAKER_xx [start-end]: whole words of that unit, in order
    turn_lines = [line for line in transcript.splitlines() if line.startswith("SPEAKER_")]
    assert len(turn_lines) >= len(units.filter(pl.col("num_words") > 0))
    first = words.filter(pl.col("unit_id") == units.filter(pl.col("num_words") > 0)["unit_id"][0]).sort("word_index")
    speaker, start = first["speaker"][0], first["start_s"][0]
    opening = []  # the unit's first turn, computed here from the words table
    for word, label in zip(first["word"], first["speaker"], strict=True):
        if label != speaker:
            break
        opening.append(word)
    assert f"{speaker} [{start:.2f}-{first['end_s'][len(opening) - 1]:.2f}]: {' '.join(opening)}\n" in transcript
    assert len(transcript) < 20 * 1700
    classes = meta["unit_classes"].value
    assert "silence__empty_room.wav | silent" in classes and "no speech detected by VAD" in classes
    # tables for every asset, column descriptions, and section times as timestamps (not plotted floats)
    assert isinstance(meta["section_entered"], dg.TimestampMetadataValue)
    assert "section_seconds" not in _metadata(result, "vad_scores") and "section_seconds" in meta
    assert {"turns_table", "speakers_table"} <= set(_metadata(result, "diarization"))
    columns = {c.name: c.description for c in meta["dagster/column_schema"].value.columns}
    assert all(columns.values()) and "speaker" in columns["text"]


def test_batch_assets_show_prints_the_same_turns(sample_run):
    import os
    import subprocess
    import sys

    result, storage = sample_run
    env = os.environ | {"BATCH_ASSETS_STORAGE_URL": storage.storage_url}
    shown = subprocess.run([sys.executable, "-m", "batch_assets.cli", "show", "--partition", P, "--unit",
                            "calls/2026/support_call.flac"], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == ""  # the answer alone: Dagster's preview/beta warnings are filtered where they are raised
    lines = [line for line in shown.stdout.splitlines() if line.startswith("CHANNEL_")]
    transcript = _metadata(result, "transcripts")["transcript"].value
    assert lines and all(line in transcript for line in lines)
    # the sample's call has each party on its own channel: read by channel, its speakers named by channel
    assert "2 channels read by channel" in shown.stdout and {line.split()[0] for line in lines} == {
        "CHANNEL_0", "CHANNEL_1"}, shown.stdout
    assert shown.stdout.count("calls__2026__support_call.flac (") == 1 and "meetings__" not in shown.stdout
    missing = subprocess.run([sys.executable, "-m", "batch_assets.cli", "show", "--partition", P, "--unit", "nope.wav"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode == 2 and "unit 'nope.wav' is not in this partition" in missing.stderr


def test_a_partition_in_one_language_loads_no_other_model(sample_run):
    """Every unit detected English (the silent room has no language): the Spanish and German models never load."""
    result, storage = sample_run
    event = next(e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "transcripts")
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    assert {name for shard in meta["asr_model_loads"] for name in shard} <= {"builtin:tiny-tdt"}
    assert set(meta["units_by_language"]) == {"en", "none"}
    units = _table(storage, "transcripts", "units").filter(pl.col("result_class") == "transcribed")
    assert set(units["language_source"]) == {"detected"} and units["language_confidence"].min() > 0.5
