"""Decode the manifest's `ok` units into flights of 16 kHz mono float32, one flight at a time.

Each flight's audio is one contiguous array stored once (`.npy`, no pickling) with the plan giving
every unit's offset and length in it, so the GPU step reads compact decoded audio and never decodes.
Only one flight's decoded audio (at most the decode budget) is held at once, however large the
partition. A unit whose full decode fails (a truncated body behind a valid header, say) is recorded as
`undecodable` in the plan and skipped; the others are unaffected. A unit that decodes well short of its
declared duration (a body cut off behind an intact header) stays `ok` so that what decoded is processed,
with a reason saying how much decoded of how much declared; the GPU section then classes it `truncated`.

A unit longer than the window (`windows.WindowSpec`, `max_unit_seconds`) flies alone and is decoded streaming
straight into overlapped windows (`windows.split_windows`), each written as a flight of its own
(`{flight_id}-w{window:04d}`, a plan row per window with its `window` and `window_start_s`): decoding it holds one
window, not the recording. A unit no longer than the window is decoded and planned exactly as before.

Every unit is read again exactly as listed: through the same confinement (`fetch.open_confined`: no
symlink followed), staged to a temporary file while checksummed, and compared with the manifest's size
and sha256 before it is decoded (streamed from that file, `decode_file`). An object that changed since
`fetched_audio` listed it (other bytes, or a symlink now) is not decoded: it is classed
`changed_since_listed`, its reason saying what differs; rerunning `fetched_audio` lists it afresh.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import tempfile
from collections.abc import Callable, Iterator

import numpy as np
import polars as pl

from batch_assets.audio.decode import TARGET_SAMPLE_RATE, DecodeError, decode_file, stream_file, suffix_of
from batch_assets.ingest.fetch import DEFAULT_RETRIES, ChangedSinceListed, FetchError, RetryPolicy, download
from batch_assets.ingest.flights import PlannedUnit, plan_flights
from batch_assets.long_units.windows import WindowSpec, split_windows
from batch_assets.schema.results import ResultClass, truncation
from batch_assets.settings import current_settings

PLAN_SCHEMA = {
    "flight_id": pl.String,
    "unit_id": pl.String,
    "position": pl.Int64,
    "offset_samples": pl.Int64,
    "num_samples": pl.Int64,
    "offset_s": pl.Float64,
    "duration_s": pl.Float64,
    "planned_duration_s": pl.Float64,
    "result_class": pl.String,
    "reason": pl.String,
    "window": pl.Int64,  # a windowed unit's window (null: the unit is processed whole)
    "window_start_s": pl.Float64,  # where that window starts in the unit
}
FLIGHTS_SCHEMA = {"flight_id": pl.String, "num_units": pl.Int64, "audio_s": pl.Float64, "audio_uri": pl.String}
DEFAULT_WINDOWS = WindowSpec()


@contextlib.contextmanager
def _staged_unit(fs, source_path: str, row: dict, retries: RetryPolicy) -> Iterator[str]:
    """The unit's object staged to a local file, read as listed (size and sha256 checked against the manifest row)."""
    rel = row["relative_key"]
    if not source_path.endswith("/" + rel):
        raise ChangedSinceListed(f"{source_path!r} does not end with its key {rel!r}")
    with tempfile.NamedTemporaryFile(suffix=suffix_of(rel), dir=current_settings().tmp_dir) as staged:
        size, sha256 = download(fs, source_path, staged, retries, confine_to=source_path[: -len(rel) - 1])
        if (size, sha256) != (row["bytes"], row["sha256"]):
            raise ChangedSinceListed(f"changed since listed: now {size} bytes, sha256 {sha256[:16]}…; listed "
                                     f"{row['bytes']} bytes, sha256 {(row['sha256'] or '')[:16]}…")
        yield staged.name


def _decode_unit(fs, source_path: str, row: dict, retries: RetryPolicy) -> np.ndarray:
    """The unit's audio, decoded streaming from its staged object."""
    with _staged_unit(fs, source_path, row, retries) as staged:
        return decode_file(staged, suffix_of(row["relative_key"]))[0]


def _unfinished_row(base: dict, offset: int, error: Exception | str | None, samples: np.ndarray | None) -> dict:
    """The plan row of a unit that did not decode to samples: its class and reason."""
    cls = {FetchError: ResultClass.FETCH_FAILED, ChangedSinceListed: ResultClass.CHANGED_SINCE_LISTED}.get(
        type(error), ResultClass.UNDECODABLE)
    if samples is not None:
        cls, error = ResultClass.EMPTY, "decoded to zero samples"
    return base | {"offset_samples": offset, "num_samples": 0, "offset_s": offset / TARGET_SAMPLE_RATE,
                   "duration_s": 0.0, "result_class": str(cls), "reason": str(error)}


def _windowed_flights(planned: PlannedUnit, row: dict, source_path_of, write_flight, spec: WindowSpec,
                      retries: RetryPolicy, log) -> tuple[list[dict], list[dict]]:
    """(plan rows, flight rows) of a unit decoded into windows, one flight per window. A unit that fails part-way
    keeps a plan row per window decoded, each classed with the failure, and no flight (nothing of it is processed)."""
    base = {"unit_id": planned.unit_id, "position": 0, "planned_duration_s": planned.duration_s}
    rows, flights, decoded = [], [], 0
    try:
        fs, path = source_path_of(row["source_uri"])
        with _staged_unit(fs, path, row, retries) as staged:
            for window, (start_s, samples) in enumerate(split_windows(stream_file(staged), spec)):
                flight_id = f"{planned.flight_id}-w{window:04d}"
                uri = write_flight(flight_id, samples)
                rows.append(base | {"flight_id": flight_id, "offset_samples": 0, "num_samples": len(samples),
                                    "offset_s": 0.0, "duration_s": len(samples) / TARGET_SAMPLE_RATE,
                                    "result_class": str(ResultClass.OK), "window": window, "window_start_s": start_s})
                flights.append({"flight_id": flight_id, "num_units": 1, "audio_s": len(samples) / TARGET_SAMPLE_RATE,
                                "audio_uri": uri})
                decoded = round(start_s * TARGET_SAMPLE_RATE) + len(samples)
                log(f"{flight_id}: window {window} of {planned.unit_id} from {start_s:.0f} s, "
                    f"{len(samples) / TARGET_SAMPLE_RATE:.1f} s")
                del samples
    except (DecodeError, FetchError, ChangedSinceListed) as error:
        if not rows:
            return [_unfinished_row(base | {"flight_id": f"{planned.flight_id}-w0000", "window": None,
                                            "window_start_s": None}, 0, error, None)], []
        failed = _unfinished_row(base, 0, error, None)
        return [r | {k: failed[k] for k in ("result_class", "reason")} for r in rows], []
    if not rows:
        return [_unfinished_row(base | {"flight_id": f"{planned.flight_id}-w0000"}, 0, None, np.zeros(0))], []
    reason = truncation(planned.duration_s, decoded / TARGET_SAMPLE_RATE) or ""
    return [r | {"reason": reason} for r in rows], flights


def prepare_flights(
    manifest: pl.DataFrame,
    source_path_of: Callable[[str], tuple[object, str]],
    write_flight: Callable[[str, np.ndarray], str],
    budget_s: float,
    max_units: int,
    concurrency: int,
    retries: RetryPolicy = DEFAULT_RETRIES,
    log: Callable[[str], None] = lambda _: None,
    windows: WindowSpec = DEFAULT_WINDOWS,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    ok = manifest.filter(pl.col("result_class") == str(ResultClass.OK))
    windowed = frozenset(uid for uid, d in zip(ok["unit_id"], ok["duration_s"], strict=True) if windows.windowed(d))
    plan = plan_flights(list(zip(ok["unit_id"], ok["duration_s"], strict=True)), budget_s, max_units, windowed)
    sources = {row["unit_id"]: row for row in ok.iter_rows(named=True)}
    by_flight: dict[str, list[PlannedUnit]] = {}
    for planned in plan:
        by_flight.setdefault(planned.flight_id, []).append(planned)

    plan_rows, flight_rows = [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for flight_id, units in by_flight.items():
            if units[0].unit_id in windowed:
                rows, flights = _windowed_flights(units[0], sources[units[0].unit_id], source_path_of, write_flight,
                                                  windows, retries, log)
                plan_rows += rows
                flight_rows += flights
                continue

            def work(planned: PlannedUnit):
                row = sources[planned.unit_id]
                fs, path = source_path_of(row["source_uri"])
                try:
                    return _decode_unit(fs, path, row, retries), None
                except (DecodeError, FetchError, ChangedSinceListed) as failure:
                    return None, failure

            decoded = list(pool.map(work, units))
            pieces, offset = [], 0
            for planned, (samples, error) in zip(units, decoded, strict=True):
                base = {
                    "flight_id": flight_id,
                    "unit_id": planned.unit_id,
                    "position": planned.position,
                    "planned_duration_s": planned.duration_s,
                }
                if samples is None or len(samples) == 0:
                    plan_rows.append(_unfinished_row(base, offset, error, samples))
                    continue
                plan_rows.append(base | {
                    "offset_samples": offset,
                    "num_samples": len(samples),
                    "offset_s": offset / TARGET_SAMPLE_RATE,
                    "duration_s": len(samples) / TARGET_SAMPLE_RATE,
                    "result_class": str(ResultClass.OK),
                    "reason": truncation(planned.duration_s, len(samples) / TARGET_SAMPLE_RATE) or "",
                })
                pieces.append(samples)
                offset += len(samples)
            audio = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
            uri = write_flight(flight_id, audio)
            flight_rows.append({"flight_id": flight_id, "num_units": sum(1 for _ in pieces),
                                "audio_s": len(audio) / TARGET_SAMPLE_RATE, "audio_uri": uri})
            log(f"{flight_id}: {len(pieces)} units, {len(audio) / TARGET_SAMPLE_RATE:.1f} audio seconds")
            del audio, pieces, decoded
    return pl.DataFrame(plan_rows, schema=PLAN_SCHEMA), pl.DataFrame(flight_rows, schema=FLIGHTS_SCHEMA)
