"""A stop signal that a GPU step is sure to act on, at its next safe point.

Inside an op, Dagster turns SIGTERM and SIGINT into `DagsterExecutionInterruptedError`, raised wherever the main
thread happens to be. Raised inside library code that swallows it, the request is lost. Measured: with a
`batch-assets run` and its GPU step both sent SIGTERM as the step started, the step was importing NeMo, the
interruption vanished there (and so did the second one, Dagster's SIGINT forwarded by the run worker), and the
step ran its whole shard to success in 2 runs of 3; on a real shard, hours while the node waits to kill it.
`stop_requests()` records each signal beside Dagster's handler, which still runs, and `checkpoint()` raises the
interruption at the next safe point (before the imports and the model load, after the load, before each
flight's device work) whatever became of that first raise. Flights committed before it stay committed; the
step fails as interrupted, as Dagster expects.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

import dagster as dg

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """The stop signals received while the block ran; `checkpoint` raises if there was one."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def checkpoint(self) -> None:
        if self.signals:
            names = ", ".join(signal.Signals(s).name for s in self.signals)
            raise dg.DagsterExecutionInterruptedError(f"stopped at a safe point after {names}")


@contextlib.contextmanager
def stop_requests() -> Iterator[StopRequests]:
    """Record SIGTERM/SIGINT for the block, chaining to the handler in place (Dagster's, which raises at once).
    A signal whose handler is not Python's (the default action, ignored) is left alone; off the main thread,
    where handlers cannot be set, nothing is recorded."""
    requests = StopRequests()
    if threading.current_thread() is not threading.main_thread():
        yield requests
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    chained = {sig: handler for sig, handler in previous.items() if callable(handler)}

    def record(signum: int, frame) -> None:
        requests.signals.append(signum)
        chained[signum](signum, frame)

    for sig in chained:
        signal.signal(sig, record)
    try:
        yield requests
    finally:
        for sig in chained:
            signal.signal(sig, previous[sig])
