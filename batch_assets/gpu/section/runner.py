"""The GPU section as a plain, typed runner: flights in, one commit per flight, a report out. No Dagster.

`run_section(models, flights, levers, load, commit, section, checkpoint)` is what the GPU steps call
(`gpu/steps/shard_work.py: process_flights`, for the shard steps and their leftover steps); the benches reach it through
those steps, and tests call it directly. It feeds the flights' audio (`load`: fetched and decoded from the source,
`source/flight_audio.py`; prepared ahead or not: lever 1), runs
VAD -> language -> diarization -> ASR on each (`flight.device_work`, whose ASR stage puts each ASR model's decoder
in the run's mode before each flight's use of it: `asr_flight.asr_ready`; then `flight.host_work`: lever 6 overlaps a
flight's host work with the next flight's device work, outside the lock), hands each flight's outcomes to `commit` and
keeps none of them: memory holds the models, the flights being prepared, the one being processed and, with lever 6, the
one whose host work is finishing, whatever the size of the partition. A decoder-mode mismatch
(`DecoderModeError`) or a device fault (`gpu/device/faults.py`: `DeviceFault`) propagates: the caller
quarantines its worker; the flights committed before it stay committed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from batch_assets.gpu.device.faults import check_interpreter
from batch_assets.gpu.device.precision import describe as describe_precision
from batch_assets.gpu.section.flight import DeviceDone, SectionUnit, UnitOutcome, device_work, host_work
from batch_assets.gpu.section.flight_feed import FlightFeed
from batch_assets.gpu.section.levers import Levers
from batch_assets.gpu.section.loaded import LoadedModels
from batch_assets.gpu.section.stats import HOST_THREAD, SectionStats
from batch_assets.source.pieces import FlightAudio


@dataclasses.dataclass(frozen=True)
class FlightWork:
    """One flight to process: its id, its seconds with each channel of a multichannel unit counted (what the
    prepare-ahead budget weighs: `PlannedFlight.load_s`), and its units to process."""

    flight_id: str
    load_s: float
    units: list[SectionUnit]


@dataclasses.dataclass
class SectionReport:
    flights: int = 0
    units: int = 0
    audio_s: float = 0.0
    section_s: float = 0.0
    lock_wait_s: float = 0.0
    entered_unix: float | None = None
    exited_unix: float | None = None
    load_wait_s: float = 0.0
    bytes_read: int = 0  # source bytes the flights' fetches read
    max_ahead_s: float = 0.0
    # lever 6: host work left when the section was exited (the last flight's), run after it
    host_after_section_s: float = 0.0
    segmentation_forwards: int = 0
    cuda_peak_bytes: int | None = None
    stats: SectionStats = dataclasses.field(default_factory=SectionStats)

    precision: str = "float32"  # what half precision ran as (`gpu/device/precision.py: describe`)

    @property
    def audio_s_per_section_s(self) -> float | None:
        return round(self.audio_s / self.section_s, 2) if self.section_s else None

    def to_metadata(self) -> dict[str, Any]:
        """The section's figures as a shard report carries them (JSON), summed per partition in its metadata."""
        stats = self.stats
        return {
            "section_seconds": round(self.section_s, 3), "lock_wait_seconds": round(self.lock_wait_s, 3),
            "entered_unix": self.entered_unix, "exited_unix": self.exited_unix,
            "audio_seconds": round(self.audio_s, 3), "units": self.units,
            "vad_seconds": round(stats.seconds["vad"], 3),
            "diarization_seconds": round(stats.seconds["diarization"], 3),
            "asr_seconds": round(stats.seconds["asr"], 3), "asr_batch_retries": stats.asr_batch_retries,
            "flight_load_wait_seconds": round(self.load_wait_s, 3), "source_bytes_read": self.bytes_read,
            "max_prepared_ahead_seconds": round(self.max_ahead_s, 1),
            "segmentation_forwards": self.segmentation_forwards,
            "segmentation_forwards_by_stage": dict(stats.segmentation_forwards),
            "segmentation_reuse": dict(stats.segmentation_reuse), "decoder_modes": sorted(stats.decoder_modes),
            "embedding_work": dict(stats.embedding_work), "embedding_paths": dict(stats.embedding_paths),
            "cuda_peak_bytes": self.cuda_peak_bytes, "decoder_checks_skipped": stats.decoder_checks_skipped,
            "stage_seconds": stats.stage_seconds(), "host_seconds_in_section": round(stats.host_in_section_s, 3),
            "host_overlapped_seconds": round(stats.overlapped_host_s, 3),
            "host_after_section_seconds": round(self.host_after_section_s, 3),
            "host_phase_device_seconds": round(stats.host_phase_device_s, 3), "batch_fallbacks": stats.batch_fallbacks,
            "precision": self.precision, "asr_model_loads": dict(stats.asr_model_loads),
            "asr_model_load_seconds": {k: round(v, 3) for k, v in stats.asr_model_load_seconds.items()},
            "asr_seconds_by_model": {k: round(v, 3) for k, v in stats.asr_seconds_by_model.items()},
            "units_with_speech_by_language": dict(stats.languages),
            "language_id_seconds": round(stats.seconds["language_id"], 3),
            "model_load_seconds_in_section": round(stats.seconds["model_load"], 3),
        }


@contextlib.contextmanager
def no_lock() -> Iterator[float]:
    yield 0.0


def run_section(
    models: LoadedModels,
    flights: list[FlightWork],
    levers: Levers,
    load: Callable[[str], FlightAudio],
    commit: Callable[[str, list[UnitOutcome]], object],
    section: AbstractContextManager[float] | None = None,
    checkpoint: Callable[[], None] = lambda: None,
) -> SectionReport:
    """Process `flights` in order inside `section` (a device lock yielding its wait); `commit` each flight's outcomes.
    `checkpoint` is called before each flight's device work: it raises to stop there (a stop signal, `stop_requests`).

    A flight's device work runs inside the section; its host work and commit run there too, or, with lever 6, on
    one background thread, overlapped with the next flight's device work (at most one flight waits for it), the
    last flight's after the section is exited. Commits stay in flight order."""
    import torch

    report = SectionReport(precision=describe_precision(models.device, levers.half_precision_enabled,
                                                            levers.tf32_enabled))
    if not flights:
        return report
    feed = FlightFeed([(f.flight_id, f.load_s) for f in flights], load=load,
                      prepare_ahead=levers.prepare_flight_enabled, budget_s=levers.decode_budget_seconds,
                      workers=levers.prepare_workers)
    work = {f.flight_id: f for f in flights}
    forwards_before = models.segmentation_forwards[0]
    stats = report.stats

    def finish(done: DeviceDone) -> None:
        outcomes = host_work(models, done, stats)
        started = time.perf_counter()
        check_interpreter(f"before committing {done.flight_id}")
        commit(done.flight_id, outcomes)
        stats.add("tables", 0.0, time.perf_counter() - started)
        report.flights += 1
        report.units += len(outcomes)
        report.audio_s += sum(o.duration_s for o in outcomes if o.vad is not None)

    host = HostWork(enabled=levers.host_overlap_enabled)
    with host:
        with section or no_lock() as waited, contextlib.ExitStack() as stack:
            report.lock_wait_s = waited
            entered, report.entered_unix = time.perf_counter(), time.time()
            if models.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(models.device)
            for flight_id, fetched in stack.enter_context(contextlib.closing(iter(feed))):  # a failure stops the
                # preparing too
                checkpoint()
                report.bytes_read += fetched.bytes_read
                done = device_work(models, flight_id, fetched.audio, work[flight_id].units, levers, stats,
                                   fetched.pieces)
                del fetched
                host.submit(finish, done)
                del done
            report.section_s, report.exited_unix = time.perf_counter() - entered, time.time()
            if models.device.type == "cuda":
                report.cuda_peak_bytes = torch.cuda.max_memory_allocated(models.device)
        if host.enabled:
            exited = time.perf_counter()
            host.wait()
            report.host_after_section_s = time.perf_counter() - exited
    report.load_wait_s, report.max_ahead_s = feed.load_wait_s, feed.max_ahead_s
    report.segmentation_forwards = models.segmentation_forwards[0] - forwards_before
    return report


class HostWork:
    """Lever 6: a flight's host work and commit on one background thread, at most one flight behind the device
    work; off, `submit` runs it at once. An error in it stops the section at the next flight (or the end) and is
    raised there; an error in the device work lets the flight already handed over finish (and commit) first."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: concurrent.futures.Future | None = None

    def __enter__(self) -> HostWork:
        if self.enabled:
            self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=HOST_THREAD)
        return self

    def submit(self, fn: Callable[[DeviceDone], None], done: DeviceDone) -> None:
        if self._pool is None:
            fn(done)
            return
        self.wait()  # the previous flight's: at most one flight's host work behind
        self._pending = self._pool.submit(fn, done)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            if exc_type is None:
                self.wait()
            elif self._pending is not None:  # the device failed: the flight handed over still commits, its error aside
                with contextlib.suppress(Exception):
                    self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
        return False
