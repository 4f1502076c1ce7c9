"""Ctrl-C that always returns: `batch-assets run` ends within `GRACE_S` + a few seconds of SIGINT or SIGTERM.

Why: the command runs the job in its own process (`dg.execute_job`, Dagster's multiprocess executor: this
process coordinates, one process per step, forked by the executor's forkserver, a child of this process). On
SIGINT or SIGTERM, Dagster's executor sets each live step's termination event and waits for the steps to end.
Measured (Dagster 1.13.27): that `term_event.set()` can block for ever, on the event's lock, a semaphore shared
with the step's child process, held by the child's termination-handler thread, a daemon thread frozen while the
child's interpreter finalized. A clean-clone CI run once found the command still alive 19 minutes after SIGTERM to
its process group; Ctrl-C in a terminal sends exactly that, SIGINT to the foreground group.

So a `StopGuard` watches for the signals beside Dagster (through `signal.set_wakeup_fd`, which every Python-level
handler feeds, Dagster's included, so no handler is replaced) on a thread of its own. The first signal gives
Dagster `GRACE_S` to stop the run its own way (the steps interrupted at their next safe point, its pool slot
freed). An operator's signal (SIGINT; SIGTERM outside a Kubernetes pod: `operator_stop`) is a cancel: the run is
marked CANCELING at once (`request_cancel`, the event log naming the signal), so Dagster ends it CANCELED, with no
run-failure event and no retry tag; a SIGTERM in a pod, the kubelet's eviction, ends it failed, so that run retries
take it up. Once the run has ended and
no process it started is alive, the guard disarms: a signal that landed as the run succeeded leaves the command to
print its summary, and `commands.run()` called from a notebook returns and leaves its host alone. When the grace
is up first, or at a second signal, the guard stops it without Dagster: it kills every
process this one started (the step processes and theirs) with SIGKILL, reports the run canceled if it had not
ended before (after the failure Dagster reports as its killed steps end, which would otherwise race it), frees its
`gpu` pool slots, releases the partitions' leases, and exits (130 after SIGINT, 143 after SIGTERM); the main
thread, should its `execute_job` return meanwhile, waits for that stop to finish. The next run of the partition starts
at once. A flight a killed step was committing is cut off and redone by the next run (`gpu/outputs/commits.py`);
nothing else is lost.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator

GRACE_S = 20.0  # Dagster's own stop; then the guard's (about a second), within the 30 s an operator is promised
STOP_S = 8.0  # the guard's own stop (the instance and the storage answering) is cut off after this
SETTLE_S = 2.0  # how long the guard's stop lets Dagster end the run once its steps are killed, before canceling it
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children, theirs, ...), from `/proc`, deepest last; zombies (dead, not yet
    reaped) are left out."""
    from batch_assets.orchestration.dead_runs import stat_fields

    children: dict[int, list[int]] = {}
    for folder in pathlib.Path("/proc").glob("[0-9]*"):
        fields = stat_fields(int(folder.name))
        if fields is not None and fields[0] not in ("Z", "X"):  # None: gone meanwhile
            children.setdefault(int(fields[1]), []).append(int(folder.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop(0)
        found.append(child)
        todo += children.get(child, [])
    return found


def kill_descendants(pid: int) -> int:
    """SIGKILL every process below `pid`; returns how many there were. Repeated until none is left (a process
    forked while the first pass ran), at most a few passes."""
    killed: set[int] = set()
    for _ in range(5):
        found = descendants(pid)
        if not found:
            break
        for child in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        killed.update(found)
        time.sleep(0.1)
    return len(killed)


class StopGuard:
    """Watches SIGINT/SIGTERM while a run executes; stops the run without Dagster when Dagster's own stop takes
    longer than `grace_s`, or at a second signal. `stop` does the stopping (kill, cancel, free, release), given
    the signal's name; `say` prints a line to the operator."""

    def __init__(self, stop: Callable[[str], None], say: Callable[[str], None], grace_s: float = GRACE_S,
                 first: Callable[[str], None] = lambda name: None):
        """`first(signal name)`: called at once on the first signal, before Dagster's own stop ends the run (the
        command marks an operator's stop as a cancel there: `request_cancel`)."""
        self.stop, self.say, self.grace_s, self.first = stop, say, grace_s, first
        self.signals: list[int] = []  # those the guard has acted on
        self._pending: list[int] = []
        self.finished = threading.Event()  # the run's own ending: set by the main thread when execute_job returns
        self._before: set[int] = set()
        self._stopping = threading.Event()  # the guard's own stop has begun: the main thread waits for it to exit
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        self._thread = threading.Thread(target=self._watch, name="batch-assets-stop-guard", daemon=True)

    @contextlib.contextmanager
    def watching(self) -> Iterator[StopGuard]:
        """For the block: every SIGINT/SIGTERM (whoever's handler runs) reaches the guard. SIGTERM is handled as
        Ctrl-C (KeyboardInterrupt) outside Dagster's own handling, so both signals end the command the same way."""
        self._before = set(descendants(os.getpid()))  # a host's own children (a notebook's): never the run's
        previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        previous_term = signal.signal(signal.SIGTERM, signal.default_int_handler)
        self._thread.start()
        try:
            yield self
        finally:
            self.finished.set()
            signal.signal(signal.SIGTERM, previous_term)
            signal.set_wakeup_fd(previous_fd)
            if self._stopping.is_set():  # the guard's stop exits the process when done: never leave it half done
                self._thread.join()

    def _watch(self) -> None:
        first = self._next_signal(None)
        if first is None:  # the run ended without a signal
            return
        name = signal.Signals(first).name
        threading.Thread(target=self._first, args=(name,), name="batch-assets-cancel", daemon=True).start()
        self._say(f"batch-assets: {name}: stopping the run (its steps stop at their next safe point); it ends "
                  f"within {self.grace_s:.0f} s; {name} again stops it now")
        second = self._next_signal(self.grace_s)
        if second is None and self._settled():
            return  # the run ended its own way, its processes with it: disarmed (the main thread reports it)
        # from here nothing ends this thread but its exit: not a closed terminal, not a stop that raises or stalls
        try:
            why = "a second signal" if second is not None else f"Dagster's own stop took over {self.grace_s:.0f} s"
            self._say(f"batch-assets: {why}: stopping the run now (its processes killed, the run canceled, its gpu "
                      "pool slot and partition leases freed)")
            self._stopping.set()
            deadline = threading.Timer(STOP_S, os._exit, (128 + first,))
            deadline.daemon = True
            deadline.start()
            self.stop(name)
        except BaseException as error:  # noqa: BLE001 - reported, then the exit below
            self._say(f"batch-assets: the stop guard's own stop failed ({type(error).__name__}: {error}); exiting")
        finally:
            os._exit(128 + first)

    def _first(self, name: str) -> None:
        """`first`, on a thread of its own: an instance that answers slowly never holds up the guard's grace."""
        try:
            self.first(name)
        except Exception as error:  # noqa: BLE001 - the stop goes on; Dagster then ends the run its own way
            self._say(f"batch-assets: could not mark the run canceling ({type(error).__name__}: {error})")

    @property
    def before(self) -> set[int]:
        """This process's children before the run (a host's own: a notebook's)."""
        return self._before

    def _settled(self) -> bool:
        """The run has ended (`execute_job` returned) and no process it started is alive but the host's services
        (multiprocessing's resource tracker; the run's forkserver is stopped as it ends: `cli/commands.py`):
        nothing left to stop."""
        from batch_assets.orchestration.executor import host_services

        return self.finished.is_set() and not set(descendants(os.getpid())) - self._before - host_services()

    def _say(self, line: str) -> None:
        with contextlib.suppress(Exception):  # the terminal may be closed or gone
            self.say(line)

    def _next_signal(self, timeout_s: float | None) -> int | None:
        """The next signal's number; None after `timeout_s`, or once the run ended by itself (with a timeout: and
        its processes too)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._pending:
            if self.finished.is_set() and (deadline is None or self._settled()):
                return None
            wait = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if wait <= 0:
                return None
            ready, _, _ = select.select([self._read], [], [], wait)
            if ready:
                self._pending += [b for b in os.read(self._read, 64) if b in SIGNALS]
        number = self._pending.pop(0)
        self.signals.append(number)
        return number


def stop_run(launch: str, partitions: list[str], storage, signal_name: str, say,
             ended: threading.Event | None = None) -> None:
    """Stop the run tagged `launch` without Dagster (`cli/stopping.py`): kill this process's children, report the
    run canceled unless it had ended before, free its `gpu` pool slots and release its partitions' leases.
    `ended`: set once Dagster has ended the run its own way (`StopGuard.finished`). Killed steps make Dagster's
    executor report the run failed at once: the cancel waits for that (up to `SETTLE_S`) and comes after it, so
    the run ends canceled, as the operator asked, whichever of the two threads is faster."""
    import dagster as dg

    from batch_assets.cli.run_output import launched_run
    from batch_assets.storage.lease import LeaseHeld, PartitionLease

    with dg.DagsterInstance.get() as instance:
        before = launched_run(instance, launch)
        killed = kill_descendants(os.getpid())
        run = before or launched_run(instance, launch)
        if run is None:
            say(f"batch-assets: no run was launched yet; {killed} process(es) killed")
            return
        if ended is not None:
            ended.wait(SETTLE_S)
        if not (before is not None and before.is_finished):
            instance.report_run_canceled(run, message=f"batch-assets run stopped by {signal_name}: its processes were "
                                         "killed, Dagster's own stop had not ended it (batch_assets/cli/stopping.py)")
        free_finished_run(instance, launch)
        status = instance.get_run_by_id(run.run_id).status.value
    for partition in partitions:
        lease = PartitionLease(storage, partition, holder=run.run_id)
        try:
            lease.acquire(0.0, log=lambda _: None)  # this run's own lease is taken back at once; another's is left
        except LeaseHeld:
            continue
        lease.release()
    say(f"batch-assets: run {run.run_id} {status.lower()}: {killed} process(es) killed, its gpu pool slot and "
        f"partition leases freed; the next run of {', '.join(partitions)} starts at once")


def operator_stop(signal_name: str) -> bool:
    """Whether a signal to `batch-assets run` is the operator's stop, a cancel: SIGINT (Ctrl-C) always; SIGTERM
    unless the command runs in a Kubernetes pod (`KUBERNETES_SERVICE_HOST`, which every pod's environment holds),
    where a SIGTERM is the kubelet's eviction: that run ends failed, so that the instance's run retries take it up."""
    return signal_name == "SIGINT" or not os.environ.get("KUBERNETES_SERVICE_HOST")


def request_cancel(launch: str, signal_name: str) -> bool:
    """Mark the run tagged `launch` CANCELING, saying who stopped it, before Dagster's own stop ends it: Dagster then
    ends it CANCELED (no run-failure event, no retry tag) where it would otherwise record an unexpected
    interruption, a failure to retry. True when marked."""
    import dagster as dg

    from batch_assets.cli.run_output import launched_run

    with dg.DagsterInstance.get() as instance:
        run = launched_run(instance, launch)
        if run is None or run.is_finished or run.status == dg.DagsterRunStatus.CANCELING:
            return False
        instance.report_run_canceling(run, message=f"batch-assets run stopped by {signal_name} from the operator: "
                                      "its steps stop at their next safe point, committed flights are kept for the "
                                      "next run (batch_assets/cli/stopping.py)")
    return True


def cancel_interrupted_run(instance, launch: str) -> bool:
    """After Dagster stopped the run tagged `launch` its own way on an operator's signal: report it canceled where
    `request_cancel` came too late (the run ended failed first). True when reported."""
    import dagster as dg

    from batch_assets.cli.run_output import launched_run

    run = launched_run(instance, launch)
    if run is None or run.status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.SUCCESS):
        return False
    instance.report_run_canceled(run, message="batch-assets run stopped by the operator's signal: Dagster stopped its "
                                 "steps; committed flights are kept for the next run (batch_assets/cli/stopping.py)")
    return True


def free_finished_run(instance, launch: str) -> int:
    """Free the `gpu` pool slots the run tagged `launch` still claims once it has ended; returns how many.

    Why: a step process that a signal ends before it reports its end ("finished without success or failure
    event") keeps its slot claimed after the run failed, and with one `gpu` slot the next run of any partition
    waits at "Step blocked by limit for pool gpu" for ever (measured: a Ctrl-C 6 s into the sample run)."""
    from batch_assets.cli.run_output import launched_run
    from batch_assets.gpu.assets import GPU_POOL

    run = launched_run(instance, launch)
    if run is None or not run.is_finished:
        return 0
    claimed = [s for s in instance.event_log_storage.get_concurrency_info(GPU_POOL).claimed_slots
               if s.run_id == run.run_id]
    instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
    return len(claimed)


def stopped_as(instance, launch: str, signals: list[int]) -> str:
    """How a run a signal stopped ended: canceled after an operator's signal (`cli/stopping.py: operator_stop`),
    failed after a SIGTERM in a Kubernetes pod (an eviction, which run retries take up)."""
    name = signal.Signals(signals[0]).name
    if operator_stop(name):
        cancel_interrupted_run(instance, launch)
        return f"canceled ({name})"
    return f"failed ({name} in a Kubernetes pod: an eviction, which run retries take up)"
