"""`batch-assets dev` (and `make dev`): `dagster dev` that stops, whole, on Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import sys
import time

from batch_assets.storage.resource import REPO_ROOT


def dev(host: str, port: int, grace_s: float = 10.0) -> int:
    """`dagster dev` that stops, whole, on Ctrl-C or SIGTERM within `grace_s` + a few seconds.

    Why a wrapper: started from a script or a background job, processes inherit SIGINT *ignored*, and then
    neither Ctrl-C nor Dagster's own shutdown reaches `dagster dev`, whose webserver and daemon wait for ever
    on its shutdown pipe. Here dagster dev runs in a session of its own with default signal dispositions;
    SIGINT, SIGTERM or SIGHUP to this process become one SIGINT to dagster dev (its clean shutdown), and
    whatever of its process group is left after `grace_s` is killed.
    """
    import signal
    import subprocess

    def defaults() -> None:
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)

    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / "dagster_home"))
    proc = subprocess.Popen([sys.executable, "-m", "dagster", "dev", "-h", host, "-p", str(port)],
                            start_new_session=True, preexec_fn=defaults)
    # A plain flag, not a threading.Event: setting an Event from a signal handler can deadlock on the lock
    # that the interrupted Event.wait() holds.
    stop: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    while proc.poll() is None and not stop:
        time.sleep(0.2)
    if proc.poll() is None:
        print("batch-assets dev: stopping dagster dev", file=sys.stderr)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            print(f"batch-assets dev: still running after {grace_s:.0f} s: killing it", file=sys.stderr)
    try:  # code servers and anything else dagster dev left in its group
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    return 0 if stop else proc.returncode
