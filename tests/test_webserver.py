"""The real thing an operator uses: `dagster dev` (webserver + daemon) on 127.0.0.1, driven over GraphQL.

One partition is launched through dagster's own GraphQL client (`submit_job_execution`, the job the
schedule uses), and a two-partition asset backfill through the same client's GraphQL transport (the
mutation the UI's "Materialize selected / backfill" sends). Both carry the launchpad's config for running
the steps in the run's process: the launch is what is tested (the daemon's runs with a process per step:
tests/test_unwatched.py). The daemon turns the backfill into runs under
the assets' BackfillPolicy: one run carries both partitions. Every run must succeed and every partition's
tables must exist. The launch depended on the hash seed once (seed 1 refused it, seed 0 did not): under seed 0 too
the backfill is launched (and must be accepted) without running it again.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
from dagster_graphql import DagsterGraphQLClient

from batch_assets.storage.resource import REPO_ROOT

from .deployments import IN_PROCESS
from .partition_sources import make_source
from .servers import free_port, wait_for_webserver

pytestmark = pytest.mark.e2e  # every test here runs the job, a server or a deployment

ASSETS = ["fetched_audio", "prepared_flights", "vad_scores", "diarization", "transcripts"]
LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message stack }
    ... on UnauthorizedError { message }
  }
}
"""
BACKFILL_STATUS = """
query($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status numPartitions }
    ... on PythonError { message }
  }
}
"""
BACKFILL_RUNS = """
query($id: String!) {
  runsOrError(filter: {tags: [{key: "dagster/backfill", value: $id}]}) {
    ... on Runs { results { runId status tags { key value } } }
  }
}
"""


@contextlib.contextmanager
def dagster_dev(tmp_path: pathlib.Path, lock_dir: pathlib.Path, seed: str):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    source = make_source(tmp_path / "source", {
        "2026-02-01": ["meetings/planning.mp3"],
        "2026-02-02": ["silence/empty_room.wav"],
        "2026-02-03": ["meetings/planning.mp3", "silence/empty_room.wav"],
    })
    storage = tmp_path / "storage"
    port = free_port()
    env = dict(os.environ) | {
        "DAGSTER_HOME": str(home), "BATCH_ASSETS_SOURCE_URL": str(source), "BATCH_ASSETS_STORAGE_URL": str(storage),
        "BATCH_ASSETS_LOCK_DIR": str(lock_dir), "BATCH_ASSETS_DEVICE": "cpu", "BATCH_ASSETS_TORCH_THREADS": "1",
        "HF_HUB_OFFLINE": "1", "PYANNOTE_METRICS_ENABLED": "false",
        # Dagster 1.13.27 refused a UI backfill of a non-subsettable multi-asset ("Targeted subset must match
        # between every key") depending on set iteration order, i.e. on the hash seed (seed 1 did, seed 0 did
        # not). The GPU multi-asset is now declared subsettable (gpu/assets.py); every seed must launch.
        "PYTHONHASHSEED": seed,
    }
    log = (tmp_path / "dagster_dev.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-h", "127.0.0.1", "-p", str(port), "-m", "batch_assets.definitions"],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        wait_for_webserver(port, process, tmp_path / "dagster_dev.log")
        yield DagsterGraphQLClient("127.0.0.1", port_number=port), storage, tmp_path / "dagster_dev.log"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


def _wait_for_run(client: DagsterGraphQLClient, run_id: str, timeout_s: float = 600) -> str:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        status = client.get_run_status(run_id).value
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return status
        time.sleep(2)
    return "TIMED_OUT"


def _tables_exist(storage: pathlib.Path, partition: str) -> bool:
    return (all((storage / asset / partition).is_dir() for asset in ASSETS)
            and (storage / "transcripts" / partition / "words.parquet").exists())


def _launch_backfill(client: DagsterGraphQLClient) -> str:
    params = {"partitionNames": ["2026-02-02", "2026-02-03"], "assetSelection": [{"path": [a]} for a in ASSETS],
              "title": "test backfill", "runConfigData": {"execution": IN_PROCESS}}  # the launchpad's config
    launched = client._execute(LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"]


def test_launch_one_partition_and_a_two_partition_backfill_over_graphql(tmp_path, lock_dir):
    """Over 60 s here: `dagster dev` (webserver, daemon, code server), the daemon's 30 s between backfill ticks
    and the two runs it launches from the UI's GraphQL calls; the launch path is what is tested."""
    with dagster_dev(tmp_path, lock_dir, seed="1") as (client, storage, log):  # the seed that once refused it
        _launch_and_run(client, storage, log)


@pytest.mark.parametrize("seed", ["0"], ids=lambda seed: f"PYTHONHASHSEED={seed}")
def test_the_ui_backfill_launches_whatever_the_hash_seed(tmp_path, lock_dir, seed):
    with dagster_dev(tmp_path, lock_dir, seed) as (client, _, _):
        _launch_backfill(client)


def _launch_and_run(client: DagsterGraphQLClient, storage: pathlib.Path, log: pathlib.Path) -> None:
    # both launched at once: the run goes while the backfill waits for the daemon's next tick (30 s)
    run_id = client.submit_job_execution("transcribe_partition", tags={"dagster/partition": "2026-02-01"},
                                         run_config={"execution": IN_PROCESS})  # steps in its process
    backfill_id = _launch_backfill(client)
    assert _wait_for_run(client, run_id) == "SUCCESS", log.read_text()[-4000:]
    assert _tables_exist(storage, "2026-02-01")

    deadline, status = time.time() + 900, None
    while time.time() < deadline:
        status = client._execute(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]["status"]
        if status in ("COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"):
            break
        time.sleep(3)
    runs = client._execute(BACKFILL_RUNS, {"id": backfill_id})["runsOrError"]["results"]
    assert status in ("COMPLETED", "COMPLETED_SUCCESS"), (status, runs, log.read_text()[-4000:])
    assert runs and all(r["status"] == "SUCCESS" for r in runs), runs
    # The BackfillPolicy put both partitions into one run (one model load).
    assert len(runs) == 1, runs
    tags = {t["key"]: t["value"] for t in runs[0]["tags"]}
    assert (tags["dagster/asset_partition_range_start"],
            tags["dagster/asset_partition_range_end"]) == ("2026-02-02", "2026-02-03")
    for partition in ("2026-02-02", "2026-02-03"):
        assert _tables_exist(storage, partition)
