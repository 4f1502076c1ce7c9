"""Fail the local runs whose processes died, and free the `gpu` pool slots they held.

Why: Dagster's default run launcher cannot check a run worker's health (only the Kubernetes, Docker and
ECS launchers can; on Kubernetes the Helm values turn run monitoring on). A run whose process was killed
(kill -9, an OOM kill, a closed laptop) on a local instance therefore stays STARTED for ever and keeps its
concurrency slots, and with one `gpu` slot every later run waits at "Step blocked by limit for pool gpu".

What: for an instance whose runs all live on this machine (SQLite storage, the default launcher), a
STARTED run is dead when every process Dagster recorded for it (the `pid` of its engine events: the run
worker and its step processes) is gone: no such process, a zombie, or a newer process that reused the
pid. Such a run is reported failed (with the reason, in its own log) and its slots are freed. Called
before `batch-assets run` launches, at the start of the ingest steps (so the new run's log says so), and
by the `free_dead_runs` sensor every 30 s under `dagster dev` / the daemon. Runs on another kind of
instance (Postgres, Kubernetes) are left to Dagster's run monitoring.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

import dagster as dg

_BOOT_TIME: list[float] = []


def _boot_time() -> float:
    if not _BOOT_TIME:
        line = next(line for line in pathlib.Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        _BOOT_TIME.append(float(line.split()[1]))
    return _BOOT_TIME[0]


def process_alive(pid: int, recorded_at: float) -> bool:
    """Whether process `pid`, recorded at unix time `recorded_at`, still runs (and is not another that took its pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    stat = pathlib.Path(f"/proc/{pid}/stat")
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, IndexError):
        return stat.parent.exists()
    if fields[0] in ("Z", "X"):  # killed, waiting for its parent to reap it
        return False
    started = _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return started <= recorded_at + 2.0  # a process started after the record is another one with a reused pid


def _is_local_instance(instance: dg.DagsterInstance) -> bool:
    from dagster._core.launcher import DefaultRunLauncher  # the launcher class is not exported at top level

    return "Sqlite" in type(instance.run_storage).__name__ and isinstance(instance.run_launcher, DefaultRunLauncher)


def recorded_processes(instance: dg.DagsterInstance, run_id: str) -> list[tuple[int, float]]:
    """(pid, unix time recorded) of every process Dagster's engine and step-worker events name for the run."""
    found = []
    kinds = {dg.DagsterEventType.ENGINE_EVENT, dg.DagsterEventType.STEP_WORKER_STARTED}
    for record in instance.get_records_for_run(run_id, of_type=kinds).records:
        event = record.event_log_entry.dagster_event
        pid = event.engine_event_data.metadata.get("pid") if event and event.engine_event_data else None
        if pid is not None:
            found.append((int(pid.value), record.event_log_entry.timestamp))
    return found


def free_dead_runs(instance: dg.DagsterInstance, log: Callable[[str], object] = print) -> list[str]:
    """Report failed every STARTED run of a local instance whose processes are all gone, and free its slots."""
    if not _is_local_instance(instance):
        return []
    freed = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])):
        processes = recorded_processes(instance, run.run_id)
        if not processes or any(process_alive(pid, at) for pid, at in processes):
            continue
        pids = ", ".join(str(pid) for pid in sorted({pid for pid, _ in processes}))
        instance.report_run_failed(
            run, message=f"the processes of this run (pid {pids}) are gone (killed?): marked failed by batch_assets so "
            "that its concurrency slots (pool gpu) are freed for later runs",
        )
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        log(f"run {run.run_id} ({run.job_name}) was STARTED but its processes (pid {pids}) are gone: "
            "marked it failed and freed its gpu pool slot")
        freed.append(run.run_id)
    return freed


@dg.sensor(name="free_dead_runs", minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Fails local runs whose processes died and frees their gpu pool slots (see batch_assets.dead_runs)")
def free_dead_runs_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    freed = free_dead_runs(context.instance, context.log.warning)
    return dg.SkipReason(f"freed the slots of dead runs {freed}" if freed else "no dead runs")
