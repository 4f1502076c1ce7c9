"""A day nobody watches (issue 57), with a real `dagster-daemon run` on a temporary instance and a real webhook.

The daemon ticks the shipped sensors on its own (BATCH_ASSETS_SENSORS_RUNNING=true, the late-audio sensor every 5 s
instead of 120 s) and launches their runs with the instance's own launcher, as a deployment's daemon does; the alerts
go to an HTTP receiver on loopback that accepts connections and never answers until the late unit is in the
tables. A day is run, a late object lands in it while another leaves it, and with nobody acting the late unit is
transcribed beside the day's other units, unchanged, once; a run refused by a guard, a day never published (its
freshness check fails) and the object gone each queue one message, posted once when the webhook answers again.
Then the daemon is restarted, and asks for and posts nothing again.

Over 60 s here, on purpose: the daemon and the run it launches (a process per step, as a deployment's) are what
is tested, so that run cannot run in process; the day is two short units, the two runs the test launches itself
(the day's and the refused one) run their steps in their own process, and one daemon session shows every case.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import dagster as dg
import polars as pl
import pytest

from batch_assets.orchestration.late_audio import LATE_TAG
from batch_assets.storage.resource import REPO_ROOT, SAMPLE_PARTITION

from . import deployments
from .conftest import SAMPLE_SOURCE, assert_units_kept, tables_of
from .servers import WebhookReceiver

pytestmark = pytest.mark.e2e  # every test here runs the job, a server or a deployment

P = SAMPLE_PARTITION
DAY_UNITS = ("meetings/planning.mp3", "silence/empty_room.wav")
LATE = "late/support_call.flac"
LATE_WITHIN_S = 360  # the bound: landed to transcribed, nobody acting


def _start_daemon(deployment, log: pathlib.Path) -> subprocess.Popen:
    return subprocess.Popen([str(pathlib.Path(sys.executable).parent / "dagster-daemon"), "run", "-m",
                             "batch_assets.definitions"], cwd=REPO_ROOT, env=os.environ | deployment.env,
                            stdout=log.open("a"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(process.pid, signal.SIGKILL)


def _wait(condition, timeout_s: float, what: str, log: pathlib.Path, every_s: float = 1.0):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:.0f} s: {log.read_text()[-4000:]}"
        time.sleep(every_s)
    return value


def _ticks(log: pathlib.Path, sensor: str) -> int:
    return log.read_text().count(f"Checking for new runs for sensor: {sensor}")


def test_a_day_nobody_watches_picks_up_late_audio_and_tells_of_failures(tmp_path):
    source = tmp_path / "source"
    for key in DAY_UNITS:
        (source / P / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_SOURCE / P / key, source / P / key)
    deployment = deployments.local(tmp_path, source)
    log = tmp_path / "daemon.log"
    with WebhookReceiver() as hook:
        hook.hanging.set()  # from the start: the webhook accepts connections and never answers (issue 65)
        deployment.env |= {"BATCH_ASSETS_SENSORS_RUNNING": "true", "BATCH_ASSETS_LATE_AUDIO_INTERVAL_SECONDS": "5",
                           "BATCH_ASSETS_ALERT_WEBHOOK_URL": hook.url, "BATCH_ASSETS_WEBSERVER_URL": "http://ui.test"}
        with deployment.instance() as instance:  # its SQLite storage made once, before two processes open it
            instance.get_runs(limit=1)
        daemon = _start_daemon(deployment, log)
        try:
            day = deployment.run(partition=P, in_process=True)  # the day's run (the schedule's, run at once)
            assert day["success"], day["log"].read_text()[-5000:]
            before = tables_of(deployment.storage)
            _wait(lambda: _ticks(log, "alert_failed_runs"), 120, "the failed-run sensor's first tick", log)
            refused = deployment.run(partition=P, run_config={"ops": {"gpu_section": {"config": {"language": "xx"}}}},
                                     in_process=True)
            assert not refused["success"]

            (source / P / LATE).parent.mkdir()
            shutil.copy(SAMPLE_SOURCE / P / "calls/2026/support_call.flac", source / P / LATE)
            (source / P / DAY_UNITS[1]).unlink()  # and an object gone: a message to post while the webhook hangs
            landed = time.monotonic()
            units = _wait(lambda: _late_unit_published(deployment), LATE_WITHIN_S, "the late unit's words", log, 0.5)
            latency = time.monotonic() - landed
            print(f"late object landed -> its words in the tables: {latency:.1f} s (late-audio sensor every 5 s), the "
                  f"webhook holding {hook.held} post(s) unanswered")
            assert hook.held and not hook.bodies
            after = tables_of(deployment.storage)
            assert_units_kept(before, after)  # the day's units as they were, the gone one's rows too
            assert units == len(DAY_UNITS) + 1

            hook.hanging.clear()  # the webhook is back: what was queued is sent, once
            texts = _wait(lambda: len(hook.texts()) >= 3 and hook.texts(), 120, "the three alerts", log)
            [failed] = [t for t in texts if refused["run_id"] in t]
            assert P in failed and "xx" in failed and f"http://ui.test/runs/{refused['run_id']}" in failed
            [stale] = [t for t in texts if "freshness miss" in t]
            assert "transcripts" in stale and "09:00 UTC" in stale
            [gone] = [t for t in texts if "gone from the source" in t]
            assert DAY_UNITS[1] in gone
            _wait(lambda: _late_runs_ended(deployment), 120, "the late run's end (its exports)", log)
            _stop(daemon)  # a redeploy, the run it launched ended (stopping the daemon stops its runs too)
            daemon = _start_daemon(deployment, log)  # a restart: the cursor and the run key stand
            ticked = _ticks(log, "late_audio")
            _wait(lambda: _ticks(log, "late_audio") >= ticked + 2, 120, "two late-audio ticks after a restart", log)
            with deployment.instance() as instance:  # once per change: none asked for again, before or after
                late_runs = [r for r in instance.get_runs() if LATE_TAG in r.tags]
            assert len(late_runs) == 1 and late_runs[0].status == dg.DagsterRunStatus.SUCCESS, late_runs
            assert len(hook.texts()) == 3, hook.texts()  # one per event, nothing for the runs that succeeded
            assert not [t for t in hook.texts() if hook.url in t]
        finally:
            _stop(daemon)


def _late_unit_published(deployment) -> int:
    """The day's published units once the late one is among them, else 0."""
    try:
        units = deployment.storage.read_parquet("transcripts", P, "units")
    except FileNotFoundError:
        return 0
    late = units.filter(pl.col("unit_id") == LATE.replace("/", "__"))
    return units.height if late.height and late["num_words"][0] > 0 else 0


def _late_runs_ended(deployment) -> bool:
    with deployment.instance() as instance:
        runs = [r for r in instance.get_runs() if LATE_TAG in r.tags]
    return bool(runs) and all(r.is_finished for r in runs)
