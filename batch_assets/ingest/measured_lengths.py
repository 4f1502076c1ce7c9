"""Lengths the GPU step measured where the listing only estimated one, and the plan laid out again from them.

Why: a unit whose container states no length (piped WAV or FLAC, VBR MP3 without Xing, fragmented MP4, a
browser's WebM: `duration_estimated`) is planned at `prepare.ESTIMATE_MARGIN` times its estimate. A stream longer
still, past a window (a long recording behind a small estimate), must be neither cut nor processed whole: the GPU
step decodes it to the end without holding it (`source/flight_audio.py`), records the length here, keyed by the
object's identity, and the plan every later step reads (`current_plan`) lays the unit out again from it, in windows,
as if its length had been listed. Windows the stream filled as planned keep their flight, place and fingerprint, so
their commits stand; the flight that held the unit whole, or its last planned window, is redone without it; the new
windows are flights no shard step owned, which the run's leftover steps process (`gpu/steps/leftovers.py`); and the
next `prepared_flights` plans the unit from its measurement at once. A measurement of another version of the object
is ignored. Stored one JSON file per unit under `measured_lengths/{partition}/`. No Dagster.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import polars as pl

from batch_assets.long_units.windows import MAX_RECORDING_SECONDS, WindowSpec, planned_spec, planned_windows
from batch_assets.source.decode import TARGET_SAMPLE_RATE
from batch_assets.source.identity import identity_columns

ASSET = "measured_lengths"


@dataclasses.dataclass(frozen=True)
class MeasuredLength:
    """A unit's object decoded to the end of its stream: how many samples (16 kHz) it holds, for which version."""

    unit_id: str
    identity: str  # `ObjectVersion.token()` of the version decoded
    samples: int

    @property
    def seconds(self) -> float:
        return self.samples / TARGET_SAMPLE_RATE


def record_measured(storage, partition: str, measured: MeasuredLength) -> str:
    """Store a measurement (replacing one of the same unit); returns its URL."""
    name = hashlib.sha256(measured.unit_id.encode()).hexdigest()[:24]
    url = storage.output_url(ASSET, partition, f"{name}.json")
    storage.write_bytes(url, json.dumps(dataclasses.asdict(measured)).encode())
    return url


def read_measured(storage, partition: str) -> dict[str, MeasuredLength]:
    """The partition's measurements by unit id (none stored: empty)."""
    found = [MeasuredLength(**record) for record in storage.read_json_files(storage.output_url(ASSET, partition))]
    return {measured.unit_id: measured for measured in found}


def valid_measurements(manifest: pl.DataFrame, measured: dict[str, MeasuredLength]) -> dict[str, float]:
    """Unit id -> measured seconds, for the units measured on the version the manifest lists."""
    if not measured:
        return {}
    tokens = [None if identity is None else identity.token() for identity in identity_columns(manifest)]
    return {uid: m.seconds for uid, token in zip(manifest["unit_id"], tokens, strict=True)
            if (m := measured.get(uid)) is not None and m.identity == token}


def with_measured(manifest: pl.DataFrame, valid: dict[str, float]) -> pl.DataFrame:
    """The manifest with these units' lengths replaced by their measurements (`duration_estimated` false)."""
    if not valid:
        return manifest
    seconds = pl.Series("measured", [valid.get(uid) for uid in manifest["unit_id"]], dtype=pl.Float64)
    return manifest.with_columns(
        duration_s=pl.when(seconds.is_not_null()).then(seconds).otherwise(pl.col("duration_s")),
        duration_estimated=pl.when(seconds.is_not_null()).then(False).otherwise(pl.col("duration_estimated")))


@dataclasses.dataclass(frozen=True)
class CurrentPlan:
    """A partition's plan as the GPU steps and the assembly read it: `prepared_flights` laid out again where a unit
    was measured past a window, and the manifest with its measured lengths."""

    manifest: pl.DataFrame
    plan: pl.DataFrame
    flights: pl.DataFrame
    spec: WindowSpec


def current_plan(storage, partition: str, manifest: pl.DataFrame) -> CurrentPlan:
    valid = valid_measurements(manifest, read_measured(storage, partition))
    plan = storage.read_parquet("prepared_flights", partition, "plan")
    flights = storage.read_parquet("prepared_flights", partition, "flights")
    spec = plan_spec(flights, plan)
    plan, flights = replanned(plan, flights, valid, spec)
    return CurrentPlan(with_measured(manifest, valid), plan, flights, spec)


def plan_spec(flights: pl.DataFrame, plan: pl.DataFrame) -> WindowSpec:
    """The window spec a plan was made with (`prepare.FLIGHTS_SCHEMA`; a plan written before it: its windowed
    unit's layout, else the default)."""
    if "window_seconds" in flights.columns and not flights.is_empty():
        return WindowSpec(float(flights["window_seconds"][0]), float(flights["window_overlap_s"][0]))
    second = plan.filter(pl.col("window") == 1)
    if second.is_empty():
        return WindowSpec()
    first = plan.filter((pl.col("window") == 0) & (pl.col("unit_id") == second["unit_id"][0]))
    return planned_spec(int(first["num_samples"][0]), float(second["window_start_s"][0]))


def replanned(plan: pl.DataFrame, flights: pl.DataFrame, measured: dict[str, float],
              spec: WindowSpec) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(plan, flights) with each `ok` unit of `measured` (unit id -> measured seconds) longer than a window laid out
    in the windows `split_windows` cuts from its stream, where its plan rows differ from them. A windowed unit's
    windows keep their flight ids (`{flight}-w{k:04d}`); a unit planned whole gets windows of its own flight
    (`{flight}-u{position:02d}-w{k:04d}`), and its old flight keeps its other units."""
    rows, after = plan.to_dicts(), {}  # after: old flight id -> the new flights that follow it
    for uid, seconds in measured.items():
        mine = [r for r in rows if r["unit_id"] == uid and r["result_class"] == "ok"]
        if not mine or not spec.windowed(seconds) or seconds > MAX_RECORDING_SECONDS:
            continue  # past the safety limit: the GPU step classes it too_long (`source/flight_audio.py`)
        windows = planned_windows(seconds, spec)
        if [(r["window"], r["window_start_s"], r["num_samples"]) for r in mine] == [
                (k, start, samples) for k, (start, samples) in enumerate(windows)]:
            continue
        first = mine[0]
        base = (first["flight_id"].rsplit("-w", 1)[0] if first["window"] is not None
                else f"{first['flight_id']}-u{first['position']:02d}")
        ids = [f"{base}-w{k:04d}" for k in range(len(windows))]
        rows = [r for r in rows if r not in mine]
        rows += [first | {"flight_id": flight_id, "offset_samples": 0, "num_samples": samples, "offset_s": 0.0,
                          "duration_s": samples / TARGET_SAMPLE_RATE, "planned_duration_s": seconds, "window": k,
                          "window_start_s": start}
                 for k, (flight_id, (start, samples)) in enumerate(zip(ids, windows, strict=True))]
        after.setdefault(mine[-1]["flight_id"], []).extend(ids)
    if not after:
        return plan, flights
    plan = pl.DataFrame(rows, schema=plan.schema)
    sizes: dict[str, list[int]] = {}
    for flight_id, samples in zip(plan["flight_id"], plan["num_samples"], strict=True):
        sizes.setdefault(flight_id, []).append(samples)
    old = {r["flight_id"]: r for r in flights.iter_rows(named=True)}
    spec_columns = {k: v for k, v in next(iter(old.values())).items() if k not in ("flight_id", "num_units", "audio_s")}
    order = []  # the old order, each unit's new windows right after its last old flight (one shard reads it once)
    for flight_id in old:
        for f in [flight_id, *after.get(flight_id, [])]:
            if f in sizes and f not in order:
                order.append(f)
    return plan, pl.DataFrame([(old.get(f) or spec_columns) | {"flight_id": f, "num_units": len(sizes[f]),
                                                               "audio_s": sum(sizes[f]) / TARGET_SAMPLE_RATE}
                               for f in order], schema=flights.schema)
