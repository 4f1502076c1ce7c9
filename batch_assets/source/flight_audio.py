"""A flight's audio, fetched and decoded by the GPU step that processes it: each object read once, nothing stored.

Why: the day streams into the GPU steps. `fetched_audio` lists (headers only) and `prepared_flights` plans
(`prepare.py`); the step owning a flight reads each of its units' objects once (`source/objects.read_once`: staged
to a temporary file while its sha256 is computed, checked to be the version listed), decodes it to 16 kHz mono
float32 (`source/decode.py`, streaming) and lays the units one after another in the flight's audio. Lever 1
(`gpu/section/flight_feed.py`) calls `FlightSource.load` for the next flights on background threads within the
decode budget while the device works, and the step starts its first flight while its models load (`start`); off,
the section calls it for each flight, one unit after another.

Each unit's piece says how it decoded (`DecodedPiece`): where its samples lie, its sha256 and bytes read, or the
class and reason it did not decode (`changed_since_listed`, `fetch_failed`, `undecodable`, `empty`): one bad unit
never fails a flight. A unit whose decoded length differs from its listed duration is processed as decoded with a
reason (`note`); well short of it is `truncated` (`schema/results.py: truncation`), unless the listing only estimated
its length (`duration_estimated`: the container states none): then what decoded to the end of its stream is the
unit, with nothing to say.

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

from batch_assets.long_units.windows import WindowSpec, piece_id, planned_spec
from batch_assets.schema.results import ResultClass, truncation
from batch_assets.source.decode import TARGET_SAMPLE_RATE, DecodeError, decode_file, suffix_of
from batch_assets.source.fetch import DEFAULT_RETRIES, ChangedSinceListed, FetchError, RetryPolicy
from batch_assets.source.identity import ObjectVersion
from batch_assets.source.objects import ReadObject, read_once
from batch_assets.source.window_stream import WindowStream

# Decoded longer than listed by more than this is worth a reason (containers round their durations)
LENGTH_TOLERANCE_S = 1.0


@dataclasses.dataclass(frozen=True)
class UnitSource:
    """A unit as listed: where its object is and what it was (size, version, duration)."""

    unit_id: str
    source_uri: str
    relative_key: str
    listed: ObjectVersion
    duration_s: float
    estimated: bool = False  # the container stated no exact length: `duration_s` is the listing's estimate


@dataclasses.dataclass(frozen=True)
class PlannedPiece:
    """A plan row of a flight: a unit, or one window of a windowed unit."""

    unit_id: str
    window: int | None = None
    windows: int = 1  # the unit's planned windows
    planned_s: float = 0.0  # the window's planned seconds (a whole unit: its listed duration)

    @property
    def piece(self) -> str:
        return piece_id(self.unit_id, self.window)


@dataclasses.dataclass(frozen=True)
class DecodedPiece:
    """How one piece of a flight decoded: its samples' place in the flight's audio, or why it has none."""

    offset_samples: int = 0
    num_samples: int = 0
    problem: tuple[ResultClass, str] | None = None  # not decoded: its class and reason
    note: str = ""  # decoded, not as listed: why (a truncation, or longer than listed)
    truncated: bool = False
    sha256: str | None = None  # of the object (a windowed unit: on each window)
    bytes_read: int = 0


@dataclasses.dataclass
class FlightAudio:
    """A flight's decoded audio and how each of its pieces decoded."""

    flight_id: str
    audio: np.ndarray
    pieces: dict[str, DecodedPiece]

    @property
    def bytes_read(self) -> int:
        return sum(p.bytes_read for p in self.pieces.values())


def _length_note(listed_s: float, decoded_s: float, estimated: bool = False, stopped: str = "") -> tuple[str, bool]:
    """(reason, truncated) for a unit that decoded to `decoded_s` of `listed_s` listed (`estimated`: the listing
    only estimated it, so a difference says nothing about the object; `stopped`: the decoder gave up part-way)."""
    if estimated:
        if stopped:
            return f"truncated: {stopped}; decoded {decoded_s:.1f} s of about {listed_s:.1f} s estimated", True
        return "", False
    if reason := truncation(listed_s, decoded_s):
        return reason + (f" ({stopped})" if stopped else ""), True
    if stopped:
        return f"{stopped}; decoded {decoded_s:.1f} s of {listed_s:.1f} s listed", False
    if decoded_s - listed_s > LENGTH_TOLERANCE_S:
        return f"decoded {decoded_s:.1f} s, {listed_s:.1f} s listed: processed as decoded", False
    return "", False


def _failed(error: Exception) -> DecodedPiece:
    cls = {FetchError: ResultClass.FETCH_FAILED, ChangedSinceListed: ResultClass.CHANGED_SINCE_LISTED}.get(
        type(error), ResultClass.UNDECODABLE)
    return DecodedPiece(problem=(cls, str(error)[:500]))


class FlightSource:
    """Loads flights' audio from the source for the section (`load`), as planned (`pieces` by flight)."""

    def __init__(self, pieces: dict[str, list[PlannedPiece]], units: dict[str, UnitSource],
                 filesystem: Callable[[str], tuple[object, str]], workers: int = 1,
                 retries: RetryPolicy = DEFAULT_RETRIES, windows: dict[str, WindowSpec] | None = None,
                 tmp_dir: str | None = None, latency_s: float = 0.0):
        """`pieces`: each flight's plan rows; `units`: each unit as listed; `filesystem(uri)`: (fs, path) of a source
        URI; `workers`: a flight's units fetched and decoded at once; `windows`: each windowed unit's window spec
        (as its plan laid it out); `latency_s`: simulated storage latency per object fetched (benchmarks)."""
        self.pieces, self.units, self.filesystem = pieces, units, filesystem
        self.workers, self.retries, self.windows, self.tmp_dir = max(1, workers), retries, windows or {}, tmp_dir
        self.latency_s = latency_s
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
                samples, decoded = decode_file(path, suffix_of(unit.relative_key))
        except (DecodeError, FetchError, ChangedSinceListed) as error:
            return None, _failed(error)
        if len(samples) == 0:
            return None, DecodedPiece(problem=(ResultClass.EMPTY, "decoded to zero samples"), sha256=read.sha256,
                                      bytes_read=read.size)
        note, truncated = _length_note(unit.duration_s, len(samples) / TARGET_SAMPLE_RATE, unit.estimated,
                                       decoded.stopped)
        return samples, DecodedPiece(0, len(samples), None, note, truncated, read.sha256, read.size)

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
                self._streams[unit_id] = WindowStream(stage, self.windows.get(unit_id, WindowSpec()), wanted,
                                                       suffix_of(unit.relative_key))
            return self._streams[unit_id]

    def _window(self, planned: PlannedPiece) -> tuple[np.ndarray | None, DecodedPiece]:
        stream = self._stream(planned.unit_id)
        last = planned.window == planned.windows - 1
        _, samples, error = stream.take(planned.window, last)
        if error is not None:
            return None, _failed(error)
        unit = self.units[planned.unit_id]
        if samples is None:
            decoded_s = stream.decoded / TARGET_SAMPLE_RATE
            said = f"truncated: {stream.stopped[0]}; decoded {decoded_s:.1f} s" if stream.stopped else (
                truncation(unit.duration_s, decoded_s) or f"decoded {decoded_s:.1f} s of {unit.duration_s:.1f} s")
            return None, DecodedPiece(problem=(ResultClass.TRUNCATED, said + (
                f": window {planned.window} of {planned.windows} planned from the listing was not reached")))
        read = stream.read  # the last window's reason says how the unit's length differs; its class stays the
        # window's own (the stitched unit's class comes from its windows')
        note = _length_note(unit.duration_s, stream.decoded / TARGET_SAMPLE_RATE, unit.estimated,
                            stream.stopped[0] if stream.stopped else "")[0] if last else ""
        if last and stream.goes_on:  # told, never dropped quietly (windowing past the listing is not built)
            note = (f"the stream goes on past the {planned.windows} window(s) planned from the listed "
                    f"{unit.duration_s:.1f} s: what follows {stream.decoded / TARGET_SAMPLE_RATE:.1f} s was not "
                    "processed")
        return samples, DecodedPiece(0, len(samples), None, note, False, read.sha256,
                                     read.size if planned.window == stream.staged_by else 0)

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
            if samples is not None:
                result = dataclasses.replace(result, offset_samples=offset)
                parts.append(samples)
                offset += len(samples)
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


def flight_source(plan: pl.DataFrame, manifest: pl.DataFrame, filesystem: Callable[[str], tuple[object, str]],
                  workers: int = 1, latency_s: float = 0.0, tmp_dir: str | None = None,
                  load: pl.DataFrame | None = None, retries: RetryPolicy = DEFAULT_RETRIES) -> FlightSource:
    """The `FlightSource` of a partition's plan rows (`prepared_flights`, class ok) and its manifest
    (`fetched_audio`), loading the rows of `load` (default: all of `plan`). `plan` holds every window of a windowed
    unit, its committed windows too: the unit's layout and window count come from them (a resumed unit's stream
    still starts at its first window)."""
    load = plan if load is None else load
    units = {row["unit_id"]: UnitSource(row["unit_id"], row["source_uri"], row["relative_key"],
                                        ObjectVersion.of_row(row), float(row["duration_s"]),
                                        bool(row.get("duration_estimated")))
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
    return FlightSource(pieces, units, filesystem, workers, retries, windows, tmp_dir, latency_s)
