"""Production-scale GPU work: shards, flight commits that survive a kill -9, one writer per partition.

Real runs on real Dagster instances (execute_job with one process per step, re-execution from failure),
real processes killed with SIGKILL, the real lease over the local filesystem and over S3 (moto).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import dagster as dg
import pytest

from batch_assets.gate.compare import GateResult, compare_partition, read_outputs
from batch_assets.gpu.shards import plan_shards
from batch_assets.lease import LeaseHeld, PartitionLease, _exclusive_create
from batch_assets.partitions import SAMPLE_PARTITION
from batch_assets.storage import REPO_ROOT, StorageResource

from .conftest import SAMPLE_SOURCE, make_resources, materialize_partition
from .s3_server import S3Server

P = SAMPLE_PARTITION
# every sample unit in a flight of its own (units are 20-50 s): five flights
FLIGHTS_OF_ONE = {"prepared_flights": {"config": {"decode_budget_seconds": 50.0}}}
TABLES = [("transcripts", "units"), ("transcripts", "words"), ("diarization", "turns"), ("diarization", "speakers"),
          ("vad_scores", "units"), ("vad_scores", "regions")]


def _tables(storage: StorageResource) -> dict:
    return {key: storage.read_parquet(*key[:1], P, key[1]) for key in TABLES}


def _same_results(a: dict, b: dict) -> None:
    for key in TABLES:
        left, right = a[key], b[key]
        if "scores_uri" in left.columns:  # a folder per root run
            left, right = left.drop("scores_uri"), right.drop("scores_uri")
        assert left.equals(right), key


def test_shards_are_whole_flights_in_plan_order_and_deterministic():
    flights = [("f0", 100.0), ("f1", 50.0), ("f2", 300.0), ("f3", 10.0), ("f4", 10.0)]
    assert plan_shards(flights, 160.0) == [["f0", "f1"], ["f2"], ["f3", "f4"]]
    assert plan_shards(flights, 160.0) == plan_shards(list(flights), 160.0)
    assert plan_shards(flights, 10_000.0) == [["f0", "f1", "f2", "f3", "f4"]]
    assert plan_shards([], 100.0) == [[]]


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory, lock_dir):
    resources = make_resources(tmp_path_factory.mktemp("one-shard"), lock_dir)
    assert materialize_partition(resources, run_config={"ops": FLIGHTS_OF_ONE}).success
    return resources["storage"]


def test_a_partition_in_several_shards_gives_the_same_tables_as_one_shard(one_shard, tmp_path, lock_dir):
    resources = make_resources(tmp_path / "storage", lock_dir)
    config = {"ops": FLIGHTS_OF_ONE | {"gpu_section": {"config": {"shard_audio_seconds": 60.0}}}}
    result = materialize_partition(resources, run_config=config)
    assert result.success
    steps = {e.step_key for e in result.all_events if e.event_type_value == "STEP_SUCCESS" and "gpu_shard[" in e.step_key}
    assert len(steps) >= 3, steps
    meta = next(e.materialization.metadata for e in result.get_asset_materialization_events()
                if e.asset_key.to_user_string() == "transcripts")
    assert meta["shards"].value == len(steps) and "| shard | flights |" in meta["shard_report"].value
    _same_results(_tables(one_shard), _tables(resources["storage"]))
    assert not (tmp_path / "storage" / "gpu_work" / P).exists()  # the commits are gone once the tables are in place


DRIVER = textwrap.dedent("""
    import sys
    import dagster as dg
    from batch_assets.cli import transcribe_partition_job
    result = dg.execute_job(dg.reconstructable(transcribe_partition_job), instance=dg.DagsterInstance.get(),
                            tags={"dagster/partition": sys.argv[1]}, run_config={"ops": %r})
    sys.exit(0 if result.success else 1)
""" % FLIGHTS_OF_ONE)


def test_a_kill_mid_shard_resumes_after_the_committed_flights(one_shard, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    storage_root = tmp_path / "storage"
    env = os.environ | {"DAGSTER_HOME": str(home), "BATCH_ASSETS_SOURCE_URL": str(SAMPLE_SOURCE),
                        "BATCH_ASSETS_STORAGE_URL": str(storage_root), "BATCH_ASSETS_LOCK_DIR": str(tmp_path / "locks"),
                        "BATCH_ASSETS_DEVICE": "cpu", "BATCH_ASSETS_TORCH_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    log = tmp_path / "driver.log"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, P], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    work = storage_root / "gpu_work" / P
    deadline = time.monotonic() + 300
    while not list(work.glob("*/*.commit.json")):
        assert driver.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "no flight committed within 300 s"
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)  # a preempted node: the run worker and its GPU step die at once
    driver.wait()
    committed = sorted(p.name.split(".")[0] for p in work.glob("*/*.commit.json"))
    assert 1 <= len(committed) < 5, committed
    assert not (storage_root / "transcripts" / P).exists()  # nothing partial visible to readers

    os.environ.update({k: env[k] for k in ("BATCH_ASSETS_SOURCE_URL", "BATCH_ASSETS_STORAGE_URL", "BATCH_ASSETS_LOCK_DIR")})
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            [dead] = instance.get_runs()
            assert dead.status == dg.DagsterRunStatus.STARTED
            instance.report_run_failed(dead)  # as run monitoring (or batch_assets.dead_runs) would
            instance.event_log_storage.free_concurrency_slots_for_run(dead.run_id)
            from batch_assets.cli import transcribe_partition_job

            again = dg.execute_job(dg.reconstructable(transcribe_partition_job), instance=instance, tags=dead.tags,
                                   reexecution_options=dg.ReexecutionOptions.from_failure(dead.run_id, instance))
            assert again.success
            meta = instance.get_latest_materialization_event(dg.AssetKey("transcripts")).asset_materialization.metadata
    finally:
        for key in ("BATCH_ASSETS_SOURCE_URL", "BATCH_ASSETS_STORAGE_URL", "BATCH_ASSETS_LOCK_DIR"):
            os.environ.pop(key, None)
    assert meta["resumed_flights"].value == len(committed)  # the committed flights were not processed again
    shard_table = meta["shard_report"].value
    assert f"| 0 | 5 | {len(committed)} |" in shard_table, shard_table
    storage = StorageResource(source_url=str(SAMPLE_SOURCE), storage_url=str(storage_root))
    resumed, whole = _tables(storage), _tables(one_shard)
    units = resumed["transcripts", "units"]
    assert units["unit_id"].is_unique().all() and len(units) == len(whole["transcripts", "units"])
    assert units.select("unit_id", "result_class", "num_speakers").equals(whole["transcripts", "units"].select("unit_id", "result_class", "num_speakers"))
    gated = GateResult(partitions=[P])
    compare_partition(gated, read_outputs(one_shard, P), read_outputs(storage, P))
    assert gated.passed and gated.word_edit_rate == 0.0, gated.table()
    _same_results(whole, resumed)
    print(f"killed after {len(committed)} of 5 flights committed; the re-execution processed {5 - len(committed)}")


def test_a_second_writer_waits_for_or_names_the_run_writing_the_partition(tmp_path, lock_dir):
    resources = make_resources(tmp_path / "storage", lock_dir)
    storage = resources["storage"]
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from batch_assets.lease import PartitionLease
        from batch_assets.storage import StorageResource
        lease = PartitionLease(StorageResource(storage_url={str(storage.storage_url)!r}), {P!r}, holder="other-run", ttl_s=3)
        with lease.held():
            print("held", flush=True)
            time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    try:
        config = {"ops": {"fetched_audio": {"config": {"lease_wait_seconds": 1.0}}}}
        refused = materialize_partition(resources, run_config=config, raise_on_error=False)
        assert not refused.success
        failure = next(str(e.event_specific_data.error) for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
        assert f"partition {P} is being written by run other-run" in failure
        assert not (tmp_path / "storage" / "fetched_audio").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # the holder dies without releasing: its lease expires (ttl 3 s)
        holder.wait()
    config = {"ops": {"fetched_audio": {"config": {"lease_wait_seconds": 60.0}}}}
    result = materialize_partition(resources, run_config=config)
    assert result.success
    units = storage.read_parquet("transcripts", P, "units")
    assert units["unit_id"].is_unique().all() and len(units) == 5


def test_the_lease_over_s3_is_exclusive_and_renewed(tmp_path):
    with S3Server() as s3:
        s3.client().create_bucket(Bucket="leases")
        storage = StorageResource(storage_url="s3://leases/out", s3_endpoint_url=s3.endpoint, s3_region="us-east-1",
                                  s3_access_key_id="testing", s3_secret_access_key="testing")
        first = PartitionLease(storage, P, holder="run-a", ttl_s=2.0)
        second = PartitionLease(storage, P, holder="run-b", ttl_s=2.0)
        with first.held():
            with pytest.raises(LeaseHeld, match="being written by run run-a"):
                second.acquire(wait_s=3.0, poll_s=0.5)  # run-a renews every ttl/3: its lease never expires while held
        second.acquire(wait_s=0.0)  # released: free at once
        assert second.generation == 2
        # a finished holder (known to the instance) frees its lease at once, however long its ttl
        third = PartitionLease(storage, P, holder="run-c", holder_alive=lambda run: run != "run-b")
        third.acquire(wait_s=0.0)
        assert third.generation == 3
        # the loser of a race for the same generation gets False (then waits), never an error
        fs, path = storage.filesystem("s3://leases/out/.leases/race/gen-000001.json")
        assert _exclusive_create(fs, path, b"{}") and not _exclusive_create(fs, path, b"{}")
    fs, path = StorageResource(storage_url=str(tmp_path)).filesystem(str(tmp_path / ".leases" / "race" / "gen-000001.json"))
    assert _exclusive_create(fs, path, b"{}") and not _exclusive_create(fs, path, b"{}")
    assert sorted(p.name for p in (tmp_path / ".leases" / "race").iterdir()) == ["gen-000001.json"]  # no temporary left


def test_a_commit_cut_off_halfway_is_not_counted(tmp_path):
    from batch_assets.gpu.commits import FlightCommits

    storage = StorageResource(storage_url=str(tmp_path))
    commits = FlightCommits(storage, P, "root-run")
    assert not commits.committed("flight-0000")
    record = commits.commit("flight-0000", [])  # a flight whose units all failed upstream: empty fragments, still a commit
    assert commits.committed("flight-0000") and len(record["files"]) == 6
    fragment = pathlib.Path(next(iter(record["files"])))
    fragment.write_bytes(fragment.read_bytes()[:10])  # the kill landed while this file was being replaced
    assert not commits.committed("flight-0000")
    commits.commit("flight-0000", [])  # redone: overwritten, not appended
    assert commits.committed("flight-0000")
    assert commits.tables(["flight-0000"])["outcomes"].is_empty()
    (tmp_path / "gpu_work" / P / "root-run" / "flight-0000.commit.json").unlink()  # fragments written, record not yet
    assert not commits.committed("flight-0000")
    with pytest.raises(RuntimeError, match="no whole commit"):
        commits.tables(["flight-0000"])
