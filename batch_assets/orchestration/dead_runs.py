"""Fail the local runs whose processes died, and free the `gpu` pool slots they held.

Why: Dagster's default run launcher cannot check a run worker's health (only the Kubernetes, Docker and
ECS launchers can; on Kubernetes the Helm values turn run monitoring on). A run whose process was killed
(kill -9, an OOM kill, a closed laptop) on a local instance therefore stays STARTED for ever and keeps its
concurrency slots, and with one `gpu` slot every later run waits at "Step blocked by limit for pool gpu".

What: for an instance whose runs all live on this machine (SQLite storage, the default launcher), a
STARTED run is dead when every process Dagster recorded for it (the `pid` of its engine events: the run
worker and its step processes) is gone: no such process, a zombie, or (for the processes whose identity
this project's steps recorded: each step's own and its parent's, the run worker) another process that
reused the pid, told apart by its start time in clock ticks since boot and the boot id from `/proc`.
Wall-clock time is never compared, so a clock step cannot declare a live run dead; a pid known only to
Dagster counts as alive while any process has it. Such a run is reported failed (with the reason, in its own
log) and its slots are freed. Called before `batch-assets run` launches, at the start of the ingest steps (so
the new run's log says so), and by the `free_dead_runs` sensor every 30 s under `dagster dev` / the daemon.
Runs on another kind of instance (Postgres, Kubernetes) are left to Dagster's run monitoring.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

import dagster as dg

IDENTITY_EVENT = "batch_assets process identity"


def _boot_id() -> str:
    return pathlib.Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def stat_fields(pid: int) -> list[str] | None:
    """The fields of `/proc/{pid}/stat` after the command name (0: state, 1: parent pid, 19: start time in clock
    ticks); None when the process is gone or hidden from us (`/proc` mounted with hidepid)."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_identity(pid: int) -> dict | None:
    """What tells this process from any later one with its pid: its start time in clock ticks since boot (from
    `/proc/{pid}/stat`, unaffected by wall-clock steps) and the boot's id; None when it is not running."""
    fields = stat_fields(pid)
    try:
        return None if fields is None else {"pid": pid, "start_ticks": int(fields[19]), "boot_id": _boot_id(),
                                            "state": fields[0]}
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, identity: dict | None = None) -> bool:
    """Whether process `pid` still runs: it exists and is not a zombie, and, when its `identity` was recorded
    (`process_identity` when it ran), it is that very process (same start ticks, same boot), not a later one
    that reused the pid. No wall clock is involved: a clock step cannot make a live process look dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        pass
    now = process_identity(pid)
    if now is None:  # it exists (kill said so) but cannot be inspected: alive, as far as we can tell
        return True
    if now["state"] in ("Z", "X"):  # killed, waiting for its parent to reap it
        return False
    if identity is None:
        return True
    return (now["start_ticks"], now["boot_id"]) == (identity.get("start_ticks"), identity.get("boot_id"))


def record_process_identity(context) -> None:
    """Record, in the run's event log, the identity of this step's process and of its parent (the run worker), so
    that the dead-run check judges them by identity (`process_alive`). Local instances only (the others are left to
    Dagster's run monitoring)."""
    from dagster._core.events import (
        EngineEventData,  # not exported at top level; what report_engine_event takes
    )

    if not _is_local_instance(context.instance):
        return
    for pid in sorted({os.getpid(), os.getppid()} - {1}):  # not init (a parent already gone)
        identity = process_identity(pid)
        if identity is None:
            continue
        context.instance.report_engine_event(
            f"{IDENTITY_EVENT}: pid {pid}", context.run,
            EngineEventData({"pid": dg.MetadataValue.int(pid),
                                "pid_start_ticks": dg.MetadataValue.int(identity["start_ticks"]),
                                "boot_id": dg.MetadataValue.text(identity["boot_id"])}),
        )


def _is_local_instance(instance: dg.DagsterInstance) -> bool:
    from dagster._core.launcher import (
        DefaultRunLauncher,  # the launcher class is not exported at top level
    )

    return "Sqlite" in type(instance.run_storage).__name__ and isinstance(instance.run_launcher, DefaultRunLauncher)


def recorded_processes(instance: dg.DagsterInstance, run_id: str) -> dict[int, dict | None]:
    """Every process Dagster's engine and step-worker events name for the run: pid -> its recorded identity (from
    `record_process_identity`), or None where only the pid is known."""
    found: dict[int, dict | None] = {}
    kinds = {dg.DagsterEventType.ENGINE_EVENT, dg.DagsterEventType.STEP_WORKER_STARTED}
    for record in instance.get_records_for_run(run_id, of_type=kinds).records:
        event = record.event_log_entry.dagster_event
        metadata = event.engine_event_data.metadata if event and event.engine_event_data else {}
        pid = metadata.get("pid")
        if pid is None:
            continue
        pid = int(pid.value)
        if "pid_start_ticks" in metadata and "boot_id" in metadata:
            found[pid] = {"start_ticks": int(metadata["pid_start_ticks"].value), "boot_id": metadata["boot_id"].value}
        else:
            found.setdefault(pid, None)
    return found


def free_dead_runs(instance: dg.DagsterInstance, log: Callable[[str], object] = print) -> list[str]:
    """Report failed every STARTED run of a local instance whose processes are all gone, and free its slots; a
    CANCELING one (an operator's Ctrl-C, then the process killed before the run ended) is reported canceled."""
    if not _is_local_instance(instance):
        return []
    freed = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED,
                                                                 dg.DagsterRunStatus.CANCELING])):
        processes = recorded_processes(instance, run.run_id)
        if not processes or any(process_alive(pid, identity) for pid, identity in processes.items()):
            continue
        pids = ", ".join(str(pid) for pid in sorted(processes))
        canceling = run.status == dg.DagsterRunStatus.CANCELING
        ended = "canceled" if canceling else "failed"
        said = (f"the processes of this run (pid {pids}) are gone (killed?): marked {ended} by batch_assets so that "
                "its concurrency slots (pool gpu) are freed for later runs")
        (instance.report_run_canceled if canceling else instance.report_run_failed)(run, message=said)
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        log(f"run {run.run_id} ({run.job_name}) was {run.status.value} but its processes (pid {pids}) are gone: "
            f"marked it {ended} and freed its gpu pool slot")
        freed.append(run.run_id)
    return freed


@dg.sensor(name="free_dead_runs", minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Fails local runs whose processes died and frees their gpu pool slots "
           "(see batch_assets.orchestration.dead_runs)")
def free_dead_runs_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
    freed = free_dead_runs(context.instance, context.log.warning)
    return dg.SkipReason(f"freed the slots of dead runs {freed}" if freed else "no dead runs")
