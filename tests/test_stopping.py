"""Ctrl-C that always returns (batch_assets/cli/stopping.py), on the hang it guards against, reproduced in miniature.

Dagster 1.13.27's multiprocess executor, on SIGINT, calls `term_event.set()` for each live step; the event's lock is
a semaphore shared with the step's process, and a step process whose termination thread froze holding it (at its
interpreter's finalization) blocks that call for ever, while Dagster's signal handler only records the signal.
Here a real child process holds a real `multiprocessing` Event's lock and a handler records SIGINT without
raising, as Dagster's does: without the guard the process never ends; with it, it ends after the grace, or at once
on a second signal, its child killed. The whole command is signalled for real in tests/test_reliability.py and, in
a loop of tries, by benchmarks/signals.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from batch_assets.orchestration.dead_runs import process_alive

SCRIPT = textwrap.dedent("""
    import contextlib, multiprocessing, os, signal, sys, time
    from batch_assets.cli.stopping import StopGuard, kill_descendants

    def hold(event, ready):
        event._cond.acquire()  # what the step's frozen termination thread holds
        ready.set()
        time.sleep(3600)

    if __name__ == "__main__":
        grace = float(sys.argv[1])
        context = multiprocessing.get_context("fork")
        event, ready = context.Event(), context.Event()
        child = context.Process(target=hold, args=(event, ready))
        child.start()
        ready.wait()
        stop = lambda name: print(f"stopped by {name}: killed {kill_descendants(os.getpid())}", flush=True)
        guard = StopGuard(stop, lambda line: print(line, flush=True), grace_s=grace)
        with guard.watching() if grace > 0 else contextlib.nullcontext():
            signal.signal(signal.SIGINT, lambda *_: None)  # Dagster's capture_interrupts: it records, never raises
            print(f"setting, child {child.pid}", flush=True)
            event.set()  # blocks: the lock is the child's
    """)


def _start(grace_s: float) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen([sys.executable, "-c", SCRIPT, str(grace_s)], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    line = process.stdout.readline()
    assert line.startswith("setting, child "), line
    time.sleep(0.5)  # in event.set() by now
    return process, int(line.split()[-1])


def test_without_the_guard_the_hang_is_for_ever():
    process, child = _start(0.0)
    os.killpg(process.pid, signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=5)  # what the CLI did for 19 minutes in a CI run
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.mark.parametrize("signals", [1, 2])
def test_the_guard_ends_the_hang_after_its_grace_or_at_a_second_signal(signals):
    grace_s = 2.0 if signals == 1 else 60.0
    process, child = _start(grace_s)
    sent = time.monotonic()
    os.kill(process.pid, signal.SIGINT)  # the command's process only: its child, frozen, keeps the lock
    if signals == 2:
        time.sleep(0.5)
        os.kill(process.pid, signal.SIGINT)
    process.wait(timeout=grace_s + 10)
    ended = time.monotonic() - sent
    out = process.stdout.read()
    print(f"{signals} SIGINT(s), grace {grace_s:.0f} s: ended after {ended:.1f} s")
    assert process.returncode == 130 and "stopped by SIGINT: killed 1" in out, out
    assert ended < (grace_s + 3 if signals == 1 else 3)
    assert ("a second signal" in out) == (signals == 2) and ("took over 2 s" in out) == (signals == 1), out
    deadline = time.monotonic() + 5
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not process_alive(child)  # gone, or a zombie


ENDS = textwrap.dedent("""
    import signal, sys, time
    from batch_assets.cli.stopping import StopGuard

    stopped = []
    guard = StopGuard(lambda name: stopped.append(name), lambda line: print(line, flush=True), grace_s=1.5)
    with guard.watching():
        signal.signal(signal.SIGINT, lambda *_: None)  # Dagster's capture_interrupts: it records, never raises
        print("running", flush=True)
        time.sleep(1.0)  # the run ends its own way meanwhile: SIGINT lands in its last second
    time.sleep(3.0)  # after the run: a notebook's next cell, or the command's summary
    print(f"after the run, alive; stopped={stopped}", flush=True)
    """)


def test_the_guard_disarms_when_the_run_ends_before_its_grace():
    """Issue 56: a SIGINT that lands as the run ends its own way (the run succeeded, or `commands.run()` returned
    in a notebook) leaves the process alone once the run and its processes are gone: no stop, no exit 130 after
    the grace."""
    process = subprocess.Popen([sys.executable, "-c", ENDS], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert process.stdout.readline().strip() == "running"
    os.kill(process.pid, signal.SIGINT)
    process.wait(timeout=15)
    out = process.stdout.read()
    assert process.returncode == 0 and "after the run, alive; stopped=[]" in out, (process.returncode, out)
    assert "stopping the run now" not in out
