"""Decode the manifest's `ok` units into flights of 16 kHz mono float32, one flight at a time.

Each flight's audio is one contiguous array stored once (`.npy`, no pickling) with the plan giving
every unit's offset and length in it, so the GPU step reads compact decoded audio and never decodes.
Only one flight's decoded audio (at most the decode budget) is held at once, however large the
partition. A unit whose full decode fails (a truncated body behind a valid header, say) is recorded as
`undecodable` in the plan and skipped; the others are unaffected. A unit that decodes well short of its
declared duration (a body cut off behind an intact header) stays `ok` so that what decoded is processed,
with a reason saying how much decoded of how much declared; the GPU section then classes it `truncated`.

Every unit is read again exactly as listed: through the same confinement (`fetch.open_confined`: no
symlink followed), staged to a temporary file while checksummed, and compared with the manifest's size
and sha256 before it is decoded (streamed from that file, `decode_file`). An object that changed since
`fetched_audio` listed it (other bytes, or a symlink now) is not decoded: it is classed
`changed_since_listed`, its reason saying what differs; rerunning `fetched_audio` lists it afresh.
"""

from __future__ import annotations

import concurrent.futures
import tempfile
from collections.abc import Callable

import numpy as np
import polars as pl

from batch_assets.audio.decode import TARGET_SAMPLE_RATE, DecodeError, decode_file, suffix_of
from batch_assets.ingest.fetch import DEFAULT_RETRIES, ChangedSinceListed, FetchError, RetryPolicy, download
from batch_assets.ingest.flights import PlannedUnit, plan_flights
from batch_assets.ingest.manifest import TMP_DIR
from batch_assets.results import ResultClass, truncation

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
}
FLIGHTS_SCHEMA = {"flight_id": pl.String, "num_units": pl.Int64, "audio_s": pl.Float64, "audio_uri": pl.String}


def _decode_unit(fs, source_path: str, row: dict, retries: RetryPolicy) -> np.ndarray:
    """The unit's audio, read as listed (size and sha256 checked against the manifest row) and decoded streaming."""
    rel = row["relative_key"]
    if not source_path.endswith("/" + rel):
        raise ChangedSinceListed(f"{source_path!r} does not end with its key {rel!r}")
    with tempfile.NamedTemporaryFile(suffix=suffix_of(rel), dir=TMP_DIR) as staged:
        size, sha256 = download(fs, source_path, staged, retries, confine_to=source_path[: -len(rel) - 1])
        if (size, sha256) != (row["bytes"], row["sha256"]):
            raise ChangedSinceListed(f"changed since listed: now {size} bytes, sha256 {sha256[:16]}…; listed "
                                     f"{row['bytes']} bytes, sha256 {(row['sha256'] or '')[:16]}…")
        samples, _ = decode_file(staged.name, suffix_of(rel))
    return samples


def prepare_flights(
    manifest: pl.DataFrame,
    source_path_of: Callable[[str], tuple[object, str]],
    write_flight: Callable[[str, np.ndarray], str],
    budget_s: float,
    max_units: int,
    concurrency: int,
    retries: RetryPolicy = DEFAULT_RETRIES,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    ok = manifest.filter(pl.col("result_class") == str(ResultClass.OK))
    plan = plan_flights(list(zip(ok["unit_id"], ok["duration_s"], strict=True)), budget_s, max_units)
    sources = {row["unit_id"]: row for row in ok.iter_rows(named=True)}
    by_flight: dict[str, list[PlannedUnit]] = {}
    for planned in plan:
        by_flight.setdefault(planned.flight_id, []).append(planned)

    plan_rows, flight_rows = [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for flight_id, units in by_flight.items():
            def work(planned: PlannedUnit):
                row = sources[planned.unit_id]
                fs, path = source_path_of(row["source_uri"])
                try:
                    return _decode_unit(fs, path, row, retries), None
                except (DecodeError, FetchError, ChangedSinceListed) as error:
                    return None, error

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
                    cls = {FetchError: ResultClass.FETCH_FAILED, ChangedSinceListed: ResultClass.CHANGED_SINCE_LISTED}.get(
                        type(error), ResultClass.UNDECODABLE)
                    if samples is not None:
                        cls, error = ResultClass.EMPTY, "decoded to zero samples"
                    plan_rows.append(base | {"offset_samples": offset, "num_samples": 0, "offset_s": offset / TARGET_SAMPLE_RATE,
                                             "duration_s": 0.0, "result_class": str(cls), "reason": str(error)})
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
