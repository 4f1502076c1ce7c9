"""What `batch-assets run` prints while and after a run: GPU progress, one line per step, the checks, the next commands.

Read from the instance's event log (the same events the UI shows), not from the processes' output: the CLI
sends Dagster's own console log and the libraries' warnings to a log file (`--verbose` shows them live),
and a watcher thread prints each step as it finishes, with what it did (from its materializations), and each
GPU step's progress line as a flight is committed (`gpu/steps/progress.py`): on a terminal, one status line rewritten
in place; otherwise (a file, a pipe, a CI log) one line per flight.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable
from typing import TextIO

import dagster as dg

from batch_assets.gpu.steps.progress import PREFIX as PROGRESS_PREFIX
from batch_assets.models.names import is_builtin

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
    outcome: str  # "ok", "failed", "retrying", "stopped" (a retry a stop signal cut off)
    did: dict[str, float] = dataclasses.field(default_factory=dict)
    error: str = ""

    def text(self) -> str:
        seconds = f"{self.seconds:7.1f} s" if self.seconds is not None else "      - s"
        did = ", ".join(f"{label} {_number(value)}" for key, label in DID if (value := self.did.get(key)) is not None)
        mark = {"ok": "ok    ", "failed": "FAILED", "retrying": "retry ", "stopped": "stop  "}[self.outcome]
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


def launched_run(instance: dg.DagsterInstance, launch: str) -> dg.DagsterRun | None:
    """The run this command launched (tagged `LAUNCH_TAG=launch`), once `execute_job` has created it."""
    runs = instance.get_runs(filters=dg.RunsFilter(tags={LAUNCH_TAG: launch}), limit=1)
    return runs[0] if runs else None


class Terminal:
    """Where the command prints: whole lines, and a status line that a terminal rewrites in place (any other
    output gets it as a line of its own). A whole line first clears the status line. Thread-safe."""

    def __init__(self, stream: TextIO, live: bool | None = None):
        """`live`: rewrite the status line in place (default: when `stream` is a terminal)."""
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self._lock = threading.Lock()
        self._status = False

    def line(self, text: str) -> None:
        with self._lock:
            if self._status:
                self.stream.write("\r\x1b[K")
                self._status = False
            self.stream.write(text + "\n")
            self.stream.flush()

    def status(self, text: str) -> None:
        if not self.live:
            self.line(text)
            return
        try:  # cut to the terminal's width: a wrapped line would not be rewritten whole
            width = os.get_terminal_size(self.stream.fileno()).columns - 1
        except OSError:
            width = 0
        with self._lock:
            self.stream.write("\r\x1b[K" + (text[:width] if width > 0 else text))
            self.stream.flush()
            self._status = True


class RunWatcher:
    """Prints each step of the run tagged `LAUNCH_TAG=launch` as it finishes, and each GPU progress line as it is
    logged (`status`); `stop()` prints the rest."""

    def __init__(self, instance: dg.DagsterInstance, launch: str, emit: Callable[[str], None],
                 status: Callable[[str], None] | None = None, poll_s: float = 0.5, run_id: str | None = None):
        """`run_id`: watch this run instead of finding the one tagged `launch` (a run already launched)."""
        self.instance, self.launch, self.emit, self.poll_s = instance, launch, emit, poll_s
        self.status = status or emit
        self.run_id = run_id
        self.steps: list[StepLine] = []
        self.checks: list[CheckLine] = []
        self.materialized: dict[str, dict] = {}  # asset -> the latest metadata values (plain)
        self._cursor: str | None = None
        self._last_id = -1  # the last record handled: a page read again after an error skips what it printed
        self._did: dict[str, dict[str, dict]] = {}  # step -> asset -> what it did
        self._check_steps: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="batch-assets-run-watcher", daemon=True)
        self.stopping: Callable[[], bool] = lambda: False  # a stop signal arrived (`StopGuard.signals`)

    def start(self) -> RunWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        try:  # whatever arrived since the last poll; never in place of the run's own result
            self.poll()
        except Exception as error:  # noqa: BLE001
            self.emit(f"batch-assets: could not read the run's last events ({type(error).__name__}: {error})")

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - a watcher never breaks the run; stop() polls once more
                pass

    def poll(self) -> None:
        """Print what the run logged since the last poll."""
        if self.run_id is None:
            run = launched_run(self.instance, self.launch)
            if run is None:
                return
            self.run_id = run.run_id
        while True:  # the events since the last poll, in order
            page = self.instance.get_records_for_run(self.run_id, cursor=self._cursor, limit=1000)
            for record in page.records:
                if record.storage_id <= self._last_id:
                    continue
                self._last_id = record.storage_id  # before: an event that fails to print is never replayed
                entry = record.event_log_entry
                if entry.dagster_event is not None and entry.dagster_event.event_type in WATCHED:
                    self._record(entry.dagster_event)
                elif entry.dagster_event is None and entry.user_message.startswith(PROGRESS_PREFIX):
                    self.status("  " + entry.user_message)
            self._cursor = page.cursor
            if not page.has_more:
                return

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
            if outcome == "retrying" and self.stopping():  # a step a stop signal interrupted is not retried
                outcome = "stopped"
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


def failure_text(watcher: RunWatcher, log_path: str | None, ended: str = "failed") -> str:
    """What a failed (or `ended="stopped"`) run says: its failing steps with their errors, where the whole log is."""
    failed = [s for s in watcher.steps if s.outcome == "failed"]
    lines = [f"run {watcher.run_id} {ended}"]
    for step in failed:
        lines.append(f"  step {step.step}: {step.error}")
    if log_path:
        lines.append(f"  the whole log: {log_path}")
    return "\n".join(lines)


def partition_summary(storage, partition: str) -> str:
    """A partition's units after a successful run: class, duration, language, speakers, words, text; where it is."""
    import polars as pl

    units = storage.read_parquet("transcripts", partition, "units")
    words = storage.read_parquet("transcripts", partition, "words")
    lines = [f"partition {partition}: {len(units)} units, {len(words)} words"]
    for row in units.sort("unit_id").iter_rows(named=True):
        duration = f"{row['duration_s']:.1f}s" if row["duration_s"] is not None else "-"
        speakers = row["num_speakers"] if row["num_speakers"] is not None else "-"
        text = (row["text"] or row["reason"] or "")[:70]
        language = row.get("language") or "-"
        lines.append(f"  {row['unit_id'][:40]:40s} {row['result_class']:20s} {duration:>7s} lang={language:<3s}"
                     f"spk={speakers} words={row['num_words']:<4d} {text}")
    by_class = units.group_by("result_class").len().sort("result_class")
    lines.append("  by class: " + ", ".join(f"{r['result_class']}={r['len']}" for r in by_class.iter_rows(named=True)))
    first = words.filter(pl.col("unit_id") == words["unit_id"][0]).head(12) if len(words) else words
    if len(first):
        lines.append(f"  first words of {first['unit_id'][0]}: " + " ".join(
            f"[{r['speaker']} {r['start_s']:.2f}] {r['word']}" for r in first.iter_rows(named=True)))
    lines.append(f"  tables under {storage.storage_url}/"
                 f"{{fetched_audio,prepared_flights,vad_scores,diarization,transcripts}}/{partition}/, "
                 f"files under {storage.output_url('transcript_exports', partition)}/")
    return "\n".join(lines)


BUILTIN_NOTE = ("note: the builtin models are trained on synthetic (espeak-ng) speech only: on real recordings expect "
                "few right words and one speaker. For your own audio run the production models: --asr-models "
                "production --diarization-pipeline pyannote/speaker-diarization-community-1, and "
                "BATCH_ASSETS_LANGUAGE_ID_MODEL=langid_ambernet (README: Production models)")


def builtin_model_note(models: dict, source_url: str, sample_url: str) -> str | None:
    """`BUILTIN_NOTE` when a run on a source other than the bundled sample (`sample_url`) used a builtin model
    (`models`: the `transcripts` materialization's: asr by language, language_id, diarization); else None."""
    used = [*(models.get("asr") or {}).values(), models.get("language_id"), models.get("diarization")]
    if source_url.rstrip("/") == sample_url.rstrip("/") or not any(is_builtin(str(m or "")) for m in used):
        return None
    return BUILTIN_NOTE
