"""A stop signal swallowed where it was raised still stops a GPU step at its next safe point
(`gpu/steps/stop_requests.py`).
The end-to-end case (a run and its GPU step sent SIGTERM as the step starts) is in test_reliability.py; this is
the mechanism on its own, in this process: a real signal, a handler that raises as Dagster's does, and library
code that swallows what it raises."""

from __future__ import annotations

import os
import signal

import dagster as dg
import pytest

from batch_assets.gpu.steps.stop_requests import stop_requests


class Raised(BaseException):
    pass


def _raise(signum, frame):
    raise Raised(signum)


def _swallowing_library_call() -> None:
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs as the call returns
    except BaseException:  # noqa: BLE001 (what some library code does)
        pass


def test_a_swallowed_interrupt_is_raised_at_the_next_checkpoint():
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        with stop_requests() as stops:
            stops.checkpoint()  # nothing yet
            _swallowing_library_call()
            with pytest.raises(dg.DagsterExecutionInterruptedError, match="SIGTERM"):
                stops.checkpoint()
        assert signal.getsignal(signal.SIGTERM) is _raise  # the handler in place before is back
        with pytest.raises(Raised):  # and it is the only one: nothing recorded any more
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_the_default_action_is_left_alone():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with stop_requests() as stops:
            assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)  # ignored, as before
            stops.checkpoint()
    finally:
        signal.signal(signal.SIGTERM, previous)
