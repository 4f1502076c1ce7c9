"""The data plane on real files: bad input classes, local vs S3 (moto server), retries, nothing lost."""

from __future__ import annotations

import dagster as dg
import polars as pl
import pytest

from batch_assets.ingest.assets import fetched_audio, prepared_flights
from batch_assets.storage.resource import StorageResource

from .audio_files import copy_tree_to_s3, write_mixed_partition
from .s3_server import S3Server

PARTITION = "2026-02-01"
INGEST_CONFIG = {
    "ops": {
        "fetched_audio": {"config": {"max_recording_seconds": 5.0, "retry_base_delay_seconds": 0.05}},
        "prepared_flights": {"config": {"decode_budget_seconds": 10.0, "max_units_per_flight": 3}},
    }
}


def _ingest(storage: StorageResource):
    result = dg.materialize(
        [fetched_audio, prepared_flights],
        partition_key=PARTITION,
        resources={"storage": storage},
        instance=dg.DagsterInstance.ephemeral(),
        run_config=INGEST_CONFIG,
    )
    assert result.success
    return (storage.read_parquet("fetched_audio", PARTITION, "manifest"),
            storage.read_parquet("prepared_flights", PARTITION, "plan"))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    source = tmp_path_factory.mktemp("source")
    expected = write_mixed_partition(source / PARTITION)
    return source, expected


@pytest.fixture(scope="module")
def local_ingest(mixed, tmp_path_factory):
    source, _ = mixed
    storage = StorageResource(source_url=str(source), storage_url=str(tmp_path_factory.mktemp("out")))
    return (*_ingest(storage), storage)


def test_every_object_gets_its_class_and_reason(mixed, local_ingest):
    _, expected = mixed
    manifest, _, storage = local_ingest
    audio_expected = {k: v for k, v in expected.items() if v[0] != "skipped"}
    assert sorted(manifest["relative_key"]) == sorted(audio_expected)  # each listed audio object exactly once
    for row in manifest.iter_rows(named=True):
        cls, reason = audio_expected[row["relative_key"]]
        assert row["result_class"] == cls, row
        assert reason in (row["reason"] or "")  # published: null where there is nothing to say
        if cls != "ok":
            assert row["reason"], row
    skipped = storage.read_parquet("fetched_audio", PARTITION, "skipped")
    assert skipped["relative_key"].to_list() == ["notes/readme.txt"]


def test_original_format_is_recorded(local_ingest):
    manifest, _, _ = local_ingest
    rows = {r["relative_key"]: r for r in manifest.iter_rows(named=True)}
    assert (rows["good/stereo_8k.wav"]["sample_rate"], rows["good/stereo_8k.wav"]["channels"]) == (8000, 2)
    assert (rows["good/music_44k.mp3"]["sample_rate"], rows["good/music_44k.mp3"]["channels"]) == (44100, 2)
    assert rows["good/voice_memo.m4a"]["sample_rate"] == 44100
    assert abs(rows["good/stereo_8k.wav"]["duration_s"] - 3.0) < 0.01


def test_good_units_are_planned_into_budgeted_flights_from_their_headers(local_ingest):
    manifest, plan, storage = local_ingest
    ok = set(manifest.filter(pl.col("result_class") == "ok")["unit_id"])
    assert set(plan["unit_id"]) == ok
    assert set(plan["result_class"]) == {"ok"}
    flights = storage.read_parquet("prepared_flights", PARTITION, "flights")
    per_flight = plan.group_by("flight_id").agg(pl.len().alias("n"), pl.col("duration_s").sum().alias("s"))
    for row in per_flight.iter_rows(named=True):
        assert row["n"] <= 3 and (row["s"] <= 10.0 + 0.1 or row["n"] == 1)
    for row in flights.iter_rows(named=True):
        samples = plan.filter(pl.col("flight_id") == row["flight_id"])["num_samples"].sum()
        assert samples == round(row["audio_s"] * 16000)
    assert set(flights.columns) == {"flight_id", "num_units", "audio_s", "window_seconds",
                                    "window_overlap_s"}  # a plan: no audio written
    assert (manifest["probe_bytes"].fill_null(0) <= 2 * 65536).all()  # headers only
    undecodable = manifest.filter(pl.col("result_class") == "undecodable")
    assert undecodable.height and (undecodable["probe_bytes"] > 0).all()  # what was read to find no header counts
    durations = dict(zip(plan["unit_id"], plan["duration_s"], strict=True))
    planned = dict(zip(manifest["unit_id"], manifest["duration_s"], strict=True))
    for uid, seconds in durations.items():
        assert abs(seconds - planned[uid]) < 0.1  # resampled to 16 kHz, length kept


def test_s3_gives_the_same_manifest_as_local(mixed, local_ingest):
    source, _ = mixed
    local_manifest, local_plan, _ = local_ingest
    with S3Server() as s3:
        client = s3.client()
        client.create_bucket(Bucket="same-as-local")
        copy_tree_to_s3(client, "same-as-local", source / PARTITION, f"recordings/{PARTITION}")
        storage = StorageResource(
            source_url="s3://same-as-local/recordings", storage_url="s3://same-as-local/batch-assets",
            s3_endpoint_url=s3.endpoint, s3_region="us-east-1",
            s3_access_key_id="testing", s3_secret_access_key="testing",
        )
        manifest, plan = _ingest(storage)
        assert manifest["source_uri"].str.starts_with("s3://same-as-local/recordings/").all()
        listed = manifest.filter(pl.col("bytes").is_not_null())
        assert listed["etag"].is_not_null().all() and listed["mtime_ns"].is_null().all()  # the store's, not mtime
        assert local_manifest.filter(pl.col("bytes").is_not_null())["mtime_ns"].is_not_null().all()
        columns = [c for c in manifest.columns if c not in ("source_uri", "etag", "version_id", "mtime_ns")]
        assert manifest.select(columns).equals(local_manifest.select(columns))
        assert plan.equals(local_plan)
        keys = {o["Key"] for o in client.list_objects_v2(Bucket="same-as-local", Prefix="batch-assets/")["Contents"]}
        assert f"batch-assets/fetched_audio/{PARTITION}/manifest.parquet" in keys


def test_retries_survive_transient_failures_and_persistent_ones_are_classed(tmp_path):
    write_mixed_partition(tmp_path / "src")  # only for the speech clip
    with S3Server(flaky_failures=2) as s3:
        client = s3.client()
        client.create_bucket(Bucket="retries")
        speech = (tmp_path / "src" / "good" / "speech.wav").read_bytes()
        for key in ("steady.wav", "flaky_1.wav", "flaky_2.wav", "broken.wav"):
            client.put_object(Bucket="retries", Key=f"in/{PARTITION}/{key}", Body=speech)
        storage = StorageResource(
            source_url="s3://retries/in", storage_url=str(tmp_path / "out"), s3_endpoint_url=s3.faulty_endpoint,
            s3_region="us-east-1", s3_access_key_id="testing", s3_secret_access_key="testing", s3_max_attempts=1,
        )
        manifest, plan = _ingest(storage)
        classes = dict(zip(manifest["relative_key"], manifest["result_class"], strict=True))
        assert classes == {"broken.wav": "fetch_failed", "flaky_1.wav": "ok", "flaky_2.wav": "ok", "steady.wav": "ok"}
        reason = manifest.filter(pl.col("relative_key") == "broken.wav")["reason"][0]
        assert "attempts" in reason and "testing" not in reason  # the error, never the credentials
        assert all(s3.proxy.failures[f"/retries/in/{PARTITION}/flaky_{i}.wav"] == 2 for i in (1, 2))
        assert set(plan["unit_id"]) == {"flaky_1.wav", "flaky_2.wav", "steady.wav"}


def test_keys_that_would_escape_the_root_are_rejected(tmp_path):
    with S3Server() as s3:
        client = s3.client()
        client.create_bucket(Bucket="escapes")
        speech = _speech_bytes(tmp_path)
        for key in (f"in/{PARTITION}/ok.wav", f"in/{PARTITION}/x/../../escape.wav", f"in/{PARTITION}/a//b.wav"):
            client.put_object(Bucket="escapes", Key=key, Body=speech)
        storage = StorageResource(
            source_url="s3://escapes/in", storage_url=str(tmp_path / "out"), s3_endpoint_url=s3.endpoint,
            s3_region="us-east-1", s3_access_key_id="testing", s3_secret_access_key="testing",
        )
        manifest, plan = _ingest(storage)
    classes = dict(zip(manifest["relative_key"], manifest["result_class"], strict=True))
    assert classes["ok.wav"] == "ok"
    rejected = [k for k, c in classes.items() if c == "rejected_key"]
    assert len(rejected) == len(classes) - 1, classes
    for uid in manifest["unit_id"]:
        assert "/" not in uid and ".." not in uid and not uid.startswith(".")
    assert plan["unit_id"].to_list() == ["ok.wav"]


def _speech_bytes(tmp_path) -> bytes:
    write_mixed_partition(tmp_path / "src")
    return (tmp_path / "src" / "good" / "speech.wav").read_bytes()
