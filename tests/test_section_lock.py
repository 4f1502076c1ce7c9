"""Two processes sharing a device never overlap inside the GPU section (the real CLI, two at once)."""

from __future__ import annotations

import os
import subprocess
import sys

import dagster as dg
import pytest

from batch_assets.storage.resource import SAMPLE_PARTITION

from .partition_sources import make_source


def _metadata(dagster_home) -> dict:
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("transcripts"))
        return {k: v.value for k, v in event.asset_materialization.metadata.items()}


@pytest.mark.e2e
def test_two_processes_on_one_device_take_turns(tmp_path):
    """Two runs in two processes share one device through the section lock (a day of one unit each: the lock between
    processes is what is tested, not the day)."""
    lock_dir = tmp_path / "locks"
    source = make_source(tmp_path / "source", {SAMPLE_PARTITION: ["meetings/planning.mp3"]})
    procs = []
    for name in ("a", "b"):
        home = tmp_path / f"home-{name}"
        home.mkdir()
        env = os.environ | {
            "DAGSTER_HOME": str(home),
            "BATCH_ASSETS_SOURCE_URL": str(source),
            "BATCH_ASSETS_STORAGE_URL": str(tmp_path / f"storage-{name}"),
            "BATCH_ASSETS_LOCK_DIR": str(lock_dir),
            "BATCH_ASSETS_DEVICE": "cpu",
            "BATCH_ASSETS_TORCH_THREADS": "1",
        }
        procs.append((home, subprocess.Popen([sys.executable, "-m", "batch_assets.cli", "run"], env=env,
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    intervals = []
    for home, proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out[-3000:]
        meta = _metadata(home)
        intervals.append((meta["section_entered"], meta["section_exited"], meta["lock_wait_seconds"]))
    (a_in, a_out, _), (b_in, b_out, _) = sorted(intervals)
    assert a_out <= b_in, f"sections overlapped: {intervals}"
    print(f"sections: {intervals}")
