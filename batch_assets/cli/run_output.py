"""What `batch-assets run` prints while and after a run: one line per step, the checks, the next commands.

Read from the instance's event log (the same events the UI shows), not from the processes' output: the CLI
sends Dagster's own console log and the libraries' warnings to a log file (`--verbose` shows them live),
and a watcher thread prints each step as it finishes, with what it did (from its materializations).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import dagster as dg

LAUNCH_TAG = "batch_assets/cli_launch"  # finds the run that `execute_job` creates, before it returns
# what a step's materializations say about it, in this order (the first partition's, summed over partitions)
DID = (("units", "units"), ("units_planned", "units planned"), ("flights", "flights"), ("audio_hours", "audio-h"),
       ("words", "words"), ("segments", "segments"), ("units_exported", "units exported"), ("files", "files"))
WATCHED = {dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE,
           dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_CHECK_EVALUATION,
           dg.DagsterEventType.STEP_UP_FOR_RETRY}


@dataclasses.dataclass
class StepLine:
    step: str
    seconds: float | None
    outcome: str  # "ok", "failed", "retrying"
    did: dict[str, float] = dataclasses.field(default_factory=dict)
    error: str = ""

    def text(self) -> str:
        seconds = f"{self.seconds:7.1f} s" if self.seconds is not None else "      - s"
        did = ", ".join(f"{label} {_number(value)}" for key, label in DID if (value := self.did.get(key)) is not None)
        mark = {"ok": "ok    ", "failed": "FAILED", "retrying": "retry "}[self.outcome]
        return f"  {mark} {self.step:44s} {seconds}  {did or self.error}".rstrip()


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclasses.dataclass
class CheckLine:
    asset: str
    name: str
    passed: bool
    severity: str
    partition: str | None

    def text(self) -> str:
        mark = "pass" if self.passed else ("warn" if self.severity == "WARN" else "FAIL")
        where = f" ({self.partition})" if self.partition else ""
        return f"  {mark}  {self.asset}: {self.name}{where}"


class RunWatcher:
    """Prints each step of the run tagged `LAUNCH_TAG=launch` as it finishes; `stop()` prints the rest."""

    def __init__(self, instance: dg.DagsterInstance, launch: str, emit: Callable[[str], None], poll_s: float = 0.5):
        self.instance, self.launch, self.emit, self.poll_s = instance, launch, emit, poll_s
        self.run_id: str | None = None
        self.steps: list[StepLine] = []
        self.checks: list[CheckLine] = []
        self.materialized: dict[str, dict] = {}  # asset -> the latest metadata values (plain)
        self._seen = 0
        self._did: dict[str, dict[str, dict]] = {}  # step -> asset -> what it did
        self._check_steps: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="batch-assets-run-watcher", daemon=True)

    def start(self) -> RunWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        try:  # whatever arrived since the last poll; never in place of the run's own result
            self._poll()
        except Exception as error:  # noqa: BLE001
            self.emit(f"batch-assets: could not read the run's last events ({type(error).__name__}: {error})")

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._poll()
            except Exception:  # noqa: BLE001 - a watcher never breaks the run; stop() polls once more
                pass

    def _poll(self) -> None:
        if self.run_id is None:
            runs = self.instance.get_runs(filters=dg.RunsFilter(tags={LAUNCH_TAG: self.launch}), limit=1)
            if not runs:
                return
            self.run_id = runs[0].run_id
        records = self.instance.all_logs(self.run_id, of_type=WATCHED)
        for record in records[self._seen:]:
            self._seen += 1  # before: an event that fails to print is never replayed
            self._record(record.dagster_event)

    def _record(self, event) -> None:
        kind, data = event.event_type, event.event_specific_data
        if kind == dg.DagsterEventType.ASSET_MATERIALIZATION:
            asset = data.materialization.asset_key.to_user_string()
            metadata = {k: v.value for k, v in data.materialization.metadata.items()}
            totals = self._did.setdefault(event.step_key, {}).setdefault(asset, {})
            for key, _ in DID:  # summed over the step's partitions
                value = metadata.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    totals[key] = round(totals.get(key, 0) + value, 4)
            self.materialized[asset] = metadata
        elif kind == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            self.checks.append(CheckLine(data.asset_key.to_user_string(), data.check_name, data.passed,
                                         str(getattr(data.severity, "value", data.severity)), data.partition))
            self._check_steps.add(event.step_key)
        elif event.step_key not in self._check_steps:  # a check's step is its line under "checks"
            outcome = {dg.DagsterEventType.STEP_SUCCESS: "ok",
                       dg.DagsterEventType.STEP_FAILURE: "failed"}.get(kind, "retrying")
            seconds = getattr(data, "duration_ms", None)
            error = getattr(data, "error", None)
            did: dict = {}
            for totals in self._did.get(event.step_key, {}).values():  # a multi-asset's last asset says most
                did |= totals
            line = StepLine(event.step_key, None if seconds is None else seconds / 1000, outcome, did,
                            error_text(error) if error else "")
            self.steps.append(line)
            self.emit(line.text())


def error_text(error) -> str:
    """The innermost error's first line (Dagster wraps a step's exception in its own)."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    lines = [line for line in (error.message or "").strip().splitlines() if line.strip()]
    return lines[0][:400] if lines else type(error).__name__


def failure_text(watcher: RunWatcher, log_path: str | None) -> str:
    """What a failed run says: its failing steps with their errors, and where the whole log is."""
    failed = [s for s in watcher.steps if s.outcome == "failed"]
    lines = [f"run {watcher.run_id} failed"]
    for step in failed:
        lines.append(f"  step {step.step}: {step.error}")
    if log_path:
        lines.append(f"  the whole log: {log_path}")
    return "\n".join(lines)

