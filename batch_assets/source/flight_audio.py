"""A flight's audio, fetched and decoded by the GPU step that processes it: each object read once, nothing stored.

Why: the day streams into the GPU steps. `fetched_audio` lists (headers only) and `prepared_flights` plans
(`prepare.py`); the step owning a flight reads each of its units' objects once (`source/objects.read_once`: staged
to a temporary file while its sha256 is computed, checked to be the version listed), decodes it to 16 kHz mono
float32 (`source/decode.py`, streaming) and lays the units one after another in the flight's audio; a unit its
channel mode reads channel by channel (`source/channels.py`, decided on its decoded channels) lays each channel
after the other (its piece's `reading`). Lever 1
(`gpu/section/flight_feed.py`) calls `FlightSource.load` for the next flights on background threads within the
decode budget while the device works, and the step starts its first flight while its models load (`start`); off,
the section calls it for each flight, one unit after another.

Each unit's piece says how it decoded (`DecodedPiece`): where its samples lie, its sha256 and bytes read, or the
class and reason it did not decode (`changed_since_listed`, `fetch_failed`, `undecodable`, `empty`): one bad unit
never fails a flight. A unit whose decoded length differs from its listed duration is processed as decoded with a
reason (`note`); well short of it is `truncated` (`schema/results.py: truncation`), unless the listing only estimated
its length (`duration_estimated`: the container states none): then what decoded to the end of its stream is the
unit, with nothing to say. Such a unit is decoded streaming and never held past a window (the plan's `spec`): a
longer stream, or a windowed unit's going on past its last planned window, is decoded to its end, counted only, and
its length told (`measured`): the step records it and the plan lays the unit out again in windows
(`ingest/measured_lengths.py`); a unit planned whole is then `failed` in this flight, whose commit the new plan
no longer takes.

A windowed unit (`long_units/windows.py`) is decoded streaming into its planned windows: the first load of one of
its windows stages the object once and opens one decoding stream, each window's load decodes up to its window
(holding the windows it passed that this step still loads, not the recording: lever 1 may load flights out of
order); a window the stream does not reach (it decoded shorter than listed) is `truncated`, and the stream is
closed once this step's windows of the unit are taken, or when the section ends (`close`). No Dagster.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import polars as pl

from batch_assets.long_units.windows import MAX_RECORDING_SECONDS, WindowSpec, planned_spec
from batch_assets.schema.results import ResultClass, truncation
from batch_assets.source.channels import AUTO, MIX, SEPARATE, decide
from batch_assets.source.decode import (
    TARGET_SAMPLE_RATE,
    DecodeError,
    decode_channels,
    split_mix,
    stream_file,
    suffix_of,
)
from batch_assets.source.fetch import DEFAULT_RETRIES, ChangedSinceListed, FetchError, RetryPolicy
from batch_assets.source.identity import ObjectVersion
from batch_assets.source.objects import ReadObject, read_once
from batch_assets.source.pieces import (
    DecodedPiece,
    FlightAudio,
    PlannedPiece,
    UnitSource,
    failed_piece,
    length_note,
)
from batch_assets.source.window_stream import WindowStream

DEFAULT_SPEC = WindowSpec()  # a plan's windows, where it says nothing else (`ingest/measured_lengths.py: plan_spec`)


class FlightSource:
    """Loads flights' audio from the source for the section (`load`), as planned (`pieces` by flight)."""

    def __init__(self, pieces: dict[str, list[PlannedPiece]], units: dict[str, UnitSource],
                 filesystem: Callable[[str], tuple[object, str]], workers: int = 1,
                 retries: RetryPolicy = DEFAULT_RETRIES, windows: dict[str, WindowSpec] | None = None,
                 tmp_dir: str | None = None, latency_s: float = 0.0, spec: WindowSpec = DEFAULT_SPEC,
                 measured: Callable[[str, str, int], None] = lambda *_: None):
        """`pieces`: each flight's plan rows; `units`: each unit as listed; `filesystem(uri)`: (fs, path) of a source
        URI; `workers`: a flight's units fetched and decoded at once; `windows`: each windowed unit's window spec
        (as its plan laid it out); `latency_s`: simulated storage latency per object fetched (benchmarks); `spec`:
        the plan's window spec; `measured(unit_id, identity token, samples)`: told the length of a unit found
        longer than its plan's room (`ingest/measured_lengths.py` plans it again from it)."""
        self.pieces, self.units, self.filesystem = pieces, units, filesystem
        self.workers, self.retries, self.windows, self.tmp_dir = max(1, workers), retries, windows or {}, tmp_dir
        self.latency_s, self.spec, self.measured = latency_s, spec, measured
        self._streams: dict[str, WindowStream] = {}
        self._streams_lock = threading.Lock()
        self._early: dict[str, concurrent.futures.Future] = {}

    @contextlib.contextmanager
    def _staged(self, unit: UnitSource) -> Iterator[tuple[str, ReadObject]]:
        """The unit's object read once into a temporary file (sha256 as it streams, checked to be the one listed)."""
        fs, path = self.filesystem(unit.source_uri)
        rel = unit.relative_key
        if not path.endswith("/" + rel):
            raise ChangedSinceListed(f"{path!r} does not end with its key {rel!r}")
        time.sleep(self.latency_s)
        with tempfile.NamedTemporaryFile(suffix=suffix_of(rel), dir=self.tmp_dir) as staged:
            read = read_once(fs, path, unit.listed, staged, path[: -len(rel) - 1], self.retries)
            yield staged.name, read

    def _whole(self, planned: PlannedPiece) -> tuple[np.ndarray | None, DecodedPiece]:
        unit = self.units[planned.unit_id]
        try:
            with self._staged(unit) as (path, read):
                if unit.estimated:  # never held past a window: a longer stream is measured, not kept
                    stacked, total, stopped = _decode_within(path, suffix_of(unit.relative_key), self.spec,
                                                             _keeps(unit))
                    samples, each = (None, None) if stacked is None else split_mix(stacked)
                    count = unit.channels if each is None else len(each)
                else:
                    samples, each, decoded = decode_channels(path, suffix_of(unit.relative_key), _keeps(unit))
                    total, stopped, count = len(samples), decoded.stopped, decoded.channels
                reading = decide(unit.mode, unit.mode_source, each, count)
                if samples is not None:  # what is kept, on its own: the channels read by channel, else the mix
                    samples = np.ascontiguousarray(each if reading.separate else samples)
        except (DecodeError, FetchError, ChangedSinceListed) as error:
            return None, failed_piece(error)
        if samples is None and _past_limit(total):
            return None, DecodedPiece(problem=(ResultClass.TOO_LONG, f"{_grown(unit, total)}: longer than the safety "
                                               f"limit ({MAX_RECORDING_SECONDS:.0f} s)"),
                                      sha256=read.sha256, bytes_read=read.size)
        if samples is None:
            self.measured(unit.unit_id, unit.listed.token(), total)
            return None, DecodedPiece(problem=(ResultClass.FAILED, f"{_grown(unit, total)}: planned again in windows "
                                               f"of {self.spec.seconds:.0f} s from what decoded"),
                                      sha256=read.sha256, bytes_read=read.size)
        if samples.shape[-1] == 0:
            return None, DecodedPiece(problem=(ResultClass.EMPTY, "decoded to zero samples"), sha256=read.sha256,
                                      bytes_read=read.size)
        length = samples.shape[-1]
        note, truncated = length_note(unit.duration_s, length / TARGET_SAMPLE_RATE, unit.estimated, stopped)
        return samples, DecodedPiece(0, length, None, note, truncated, read.sha256, read.size, reading)

    def _stream(self, unit_id: str) -> WindowStream:
        with self._streams_lock:
            if unit_id not in self._streams:
                unit = self.units[unit_id]

                def stage() -> tuple[str, ReadObject, contextlib.ExitStack]:
                    stack = contextlib.ExitStack()
                    try:
                        path, read = stack.enter_context(self._staged(unit))
                    except BaseException:
                        stack.close()
                        raise
                    return path, read, stack

                wanted = {p.window for ps in self.pieces.values() for p in ps if p.unit_id == unit_id}
                self._streams[unit_id] = WindowStream(
                    stage, self.windows.get(unit_id, self.spec), wanted, suffix_of(unit.relative_key), _keeps(unit),
                    lambda each, unit=unit: decide(unit.mode, unit.mode_source, each,
                                                   unit.channels if each is None else len(each)))
            return self._streams[unit_id]

    def _window(self, planned: PlannedPiece) -> tuple[np.ndarray | None, DecodedPiece]:
        stream = self._stream(planned.unit_id)
        last = planned.window == planned.windows - 1
        _, samples, error = stream.take(planned.window, last)
        if error is not None:
            return None, failed_piece(error)
        unit = self.units[planned.unit_id]
        if samples is None:
            decoded_s = stream.decoded / TARGET_SAMPLE_RATE
            said = f"truncated: {stream.stopped[0]}; decoded {decoded_s:.1f} s" if stream.stopped else (
                truncation(unit.duration_s, decoded_s) or f"decoded {decoded_s:.1f} s of {unit.duration_s:.1f} s")
            return None, DecodedPiece(problem=(ResultClass.TRUNCATED, said + (
                f": window {planned.window} of {planned.windows} planned from the listing was not reached")))
        read = stream.read  # the last window's reason says how the unit's length differs; its class stays the
        # window's own (the stitched unit's class comes from its windows')
        note = length_note(unit.duration_s, stream.decoded / TARGET_SAMPLE_RATE, unit.estimated,
                            stream.stopped[0] if stream.stopped else "")[0] if last else ""
        if last and stream.goes_on and _past_limit(stream.decoded):
            note = (f"{_grown(unit, stream.decoded)}: longer than the safety limit ({MAX_RECORDING_SECONDS:.0f} s), "
                    f"what follows the {planned.windows} window(s) planned was not processed")
        elif last and stream.goes_on:  # measured to its end: planned again in windows, the rest processed later
            self.measured(unit.unit_id, unit.listed.token(), stream.decoded)
            note = ""
        return samples, DecodedPiece(0, samples.shape[-1], None, note, False, read.sha256,
                                     read.size if planned.window == stream.staged_by else 0, stream.reading)

    def start(self, flight_ids: list[str]) -> None:
        """Begin loading these flights now, one after another on a background thread: the GPU step starts its first
        flight (lever 1) while its models load, so the section does not wait for it. `load` takes it from there."""
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="first-flight")
        for flight_id in flight_ids:
            self._early[flight_id] = pool.submit(self._load, flight_id)
        pool.shutdown(wait=False)

    def load(self, flight_id: str) -> FlightAudio:
        """The flight's audio: its pieces fetched and decoded (`workers` at once), laid out in plan order."""
        early = self._early.pop(flight_id, None)
        return early.result() if early is not None else self._load(flight_id)

    def _load(self, flight_id: str) -> FlightAudio:
        planned = self.pieces.get(flight_id, [])
        work = self._window if planned and planned[0].window is not None else self._whole
        with concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="fetch-unit") as pool:
            decoded = list(pool.map(work, planned))
        parts, pieces, offset = [], {}, 0
        for piece, (samples, result) in zip(planned, decoded, strict=True):
            if samples is not None:  # read by channel: (channels, samples), each channel after the other
                result = dataclasses.replace(result, offset_samples=offset)
                parts.extend(samples if samples.ndim == 2 else [samples])
                offset += samples.size
            pieces[piece.piece] = result
        audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        return FlightAudio(flight_id, audio, pieces)

    def close(self) -> None:
        """Close every windowed unit's stream still open (the section ended before its last window), after any flight
        started early and not taken has finished loading (it is dropped)."""
        for early in self._early.values():
            early.cancel()
            concurrent.futures.wait([early])
        self._early.clear()
        with self._streams_lock:
            for stream in self._streams.values():
                with stream.lock:
                    stream.close()
                    stream.held.clear()
            self._streams.clear()


def _decode_within(path: str, suffix: str, spec: WindowSpec, keep: bool) -> tuple[np.ndarray | None, int, str]:
    """(samples, or None past a window; the samples the stream holds; what ffmpeg said where it gave up). `keep`: a
    multichannel stream's samples are the mix and each channel side by side (`decode.stream_file`)."""
    limit, total, parts, stopped = round(spec.seconds * TARGET_SAMPLE_RATE), 0, [], []
    for piece in stream_file(path, suffix, stopped, keep):
        total += len(piece)
        if total <= limit:
            parts.append(piece)
        elif parts:
            parts = []  # past a window: only counted from here
    samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
    return (None if total > limit else samples), total, stopped[0] if stopped else ""


def _keeps(unit: UnitSource) -> bool:
    """Whether a unit's channels are decoded beside its mix: its mode may read it by channel (`auto`: two channels
    as listed, or one the listing could not count)."""
    return unit.mode == SEPARATE or (unit.mode == AUTO and unit.channels <= 2)


def _past_limit(samples: int) -> bool:
    """Longer than the safety limit (`MAX_RECORDING_SECONDS`): never measured, so never planned again."""
    return samples > MAX_RECORDING_SECONDS * TARGET_SAMPLE_RATE


def _grown(unit: UnitSource, samples: int) -> str:
    return (f"decoded {samples / TARGET_SAMPLE_RATE:.1f} s, {'an estimated' if unit.estimated else 'a listed'} "
            f"{unit.duration_s:.1f} s planned")


def flight_source(plan: pl.DataFrame, manifest: pl.DataFrame, filesystem: Callable[[str], tuple[object, str]],
                  workers: int = 1, latency_s: float = 0.0, tmp_dir: str | None = None,
                  load: pl.DataFrame | None = None, retries: RetryPolicy = DEFAULT_RETRIES,
                  spec: WindowSpec = DEFAULT_SPEC,
                  measured: Callable[[str, str, int], None] = lambda *_: None,
                  modes: dict[str, tuple[str, str]] | None = None) -> FlightSource:
    """The `FlightSource` of a partition's plan rows (`prepared_flights`, class ok) and its manifest
    (`fetched_audio`), loading the rows of `load` (default: all of `plan`). `plan` holds every window of a windowed
    unit, its committed windows too: the unit's layout and window count come from them (a resumed unit's stream
    still starts at its first window); `spec` and `measured`: as `FlightSource` takes them; `modes`: each unit's
    channel mode and what chose it (`source/channels.py`; a unit not in it is mixed down)."""
    load, modes = plan if load is None else load, modes or {}
    units = {row["unit_id"]: UnitSource(row["unit_id"], row["source_uri"], row["relative_key"],
                                        ObjectVersion.of_row(row), float(row["duration_s"]),
                                        bool(row.get("duration_estimated")), int(row.get("channels") or 1),
                                        *modes.get(row["unit_id"], (MIX, "setting")))
             for row in manifest.filter(pl.col("unit_id").is_in(load["unit_id"].unique().to_list()))
             .iter_rows(named=True)}
    windowed = plan.filter(pl.col("window").is_not_null()).sort("unit_id", "window")
    counts = dict(windowed.group_by("unit_id").agg(pl.len()).iter_rows())
    windows = {}
    for uid, rows in windowed.group_by("unit_id", maintain_order=True):
        if rows["window"].to_list() != list(range(rows.height)):
            raise ValueError(f"the plan holds windows {rows['window'].to_list()} of unit {uid[0]!r}: pass every "
                             "window of a windowed unit, the committed ones too")
        if rows.height > 1:
            windows[uid[0]] = planned_spec(rows["num_samples"][0], rows["window_start_s"][1])
    pieces: dict[str, list[PlannedPiece]] = {}
    for row in load.sort("flight_id", "position", maintain_order=True).iter_rows(named=True):
        pieces.setdefault(row["flight_id"], []).append(PlannedPiece(
            row["unit_id"], row["window"], counts.get(row["unit_id"], 1), float(row["duration_s"])))
    return FlightSource(pieces, units, filesystem, workers, retries, windows, tmp_dir, latency_s, spec, measured)
