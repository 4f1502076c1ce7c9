"""A GPU step's progress, one line per committed flight. No Dagster.

Why: a shard of four audio-hours on a CPU, or a backfill's day on a GPU, is otherwise a silent step between its
start and its end, with no way to tell a slow run from a stuck one or to guess when it ends. `StepProgress`
counts the step's planned flights (those it owns, the resumed ones done from the start) and, as each flight is
committed, gives the line the step logs to Dagster's event log (the UI's step log) and `batch-assets run`
shows live (`cli/run_output.py`): flights done of planned, units and audio-hours done, audio-hours per hour so
far (of the flights this step processed, since its first flight started), and the time left at that rate.
"""

from __future__ import annotations

import dataclasses
import time

PREFIX = "progress: "  # how the command line tells a progress line from the step's other log lines


@dataclasses.dataclass
class StepProgress:
    step: str  # "2026-01-15 shard 0"
    planned_flights: int
    planned_audio_s: float
    done_flights: int = 0  # resumed flights count as done from the start
    done_audio_s: float = 0.0
    units: int = 0  # units (or windows) in the flights this step committed
    processed_audio_s: float = 0.0
    started: float = dataclasses.field(default_factory=time.monotonic)

    def resumed(self, flights: int, audio_s: float) -> None:
        self.done_flights += flights
        self.done_audio_s += audio_s

    def flight_done(self, flight_id: str, units: int, audio_s: float, now: float | None = None) -> str:
        """Count one committed flight; returns the line to log."""
        self.done_flights += 1
        self.done_audio_s += audio_s
        self.processed_audio_s += audio_s
        self.units += units
        return self.line(flight_id, time.monotonic() if now is None else now)

    def line(self, flight_id: str, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        rate = self.processed_audio_s / elapsed  # audio-hours per hour
        left_s = max(self.planned_audio_s - self.done_audio_s, 0.0)
        eta = "done" if self.done_flights >= self.planned_flights else (
            f"about {duration(left_s / rate)} left" if rate > 0 else "time left unknown")
        return (f"{PREFIX}{self.step}: {self.done_flights} of {self.planned_flights} flights done ({flight_id} "
                f"committed), {self.units} units, {self.done_audio_s / 3600:.3f} of {self.planned_audio_s / 3600:.3f} "
                f"audio-h, {rate:.1f} audio-h per hour, {eta}")


def duration(seconds: float) -> str:
    """`42 s`, `7 min`, `3 h 05 min`."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min"
