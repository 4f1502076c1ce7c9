"""Two processes sharing a device never overlap inside the GPU section (two runs, a process each, at once)."""

from __future__ import annotations

import dagster as dg
import pytest

from batch_assets.storage.resource import SAMPLE_PARTITION

from . import deployments
from .partition_sources import make_source


def _metadata(dagster_home) -> dict:
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("transcripts"))
        return {k: v.value for k, v in event.asset_materialization.metadata.items()}


@pytest.mark.e2e
def test_two_processes_on_one_device_take_turns(tmp_path):
    """Two runs in two processes share one device through the section lock (a day of one unit each, each run's steps
    in its own process: the lock between processes is what is tested, not the day or the steps)."""
    source = make_source(tmp_path / "source", {SAMPLE_PARTITION: ["meetings/planning.mp3"]})
    started = []
    for name in ("a", "b"):
        deployment = deployments.local(tmp_path / name, source)
        deployment.env["BATCH_ASSETS_LOCK_DIR"] = str(tmp_path / "locks")  # one device
        started.append((deployment, deployment.start(partition=SAMPLE_PARTITION, in_process=True)))
    intervals = []
    for deployment, (process, log) in started:
        answer = deployment.finish(process, log)
        assert answer["success"], log.read_text()[-3000:]
        meta = _metadata(deployment.home)
        intervals.append((meta["section_entered"], meta["section_exited"], meta["lock_wait_seconds"]))
    (a_in, a_out, _), (b_in, b_out, _) = sorted(intervals)
    assert a_out <= b_in, f"sections overlapped: {intervals}"
    print(f"sections: {intervals}")
