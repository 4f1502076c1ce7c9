"""The flight plan of a partition: its `ok` units packed into flights under the decode budget, from their listed
durations (each channel's seconds counted for a unit with several). Nothing is fetched or decoded here and no audio
is written: the GPU step that owns a flight fetches and decodes its units itself (`source/flight_audio.py`), each
object read once.

Each plan row gives a unit's flight, position and planned place in the flight's audio (`offset_samples`,
`num_samples`, from the listed duration at 16 kHz); the GPU step places the units as they decode, and a unit whose
decoded length differs from the listing is processed as decoded, with a reason (`flight_audio.py`).

A unit longer than the window (`windows.WindowSpec`, `max_unit_seconds`) flies alone in overlapped windows, each a
flight of its own (`{flight_id}-w{window:04d}`, a plan row per window with its `window` and `window_start_s`),
planned from the listed duration as `windows.split_windows` cuts the decoded stream: the GPU step decodes the unit
streaming into those windows, holding one window, not the recording. A unit whose container states no length is
planned at `ESTIMATE_MARGIN` times the listing's estimate, or from the length a GPU step measured
(`measured_lengths.py`: the caller gives the manifest with it). No Dagster.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from batch_assets.ingest.flights import PlannedUnit, plan_flights, several_channels
from batch_assets.long_units.windows import WindowSpec, planned_windows
from batch_assets.schema.results import ResultClass
from batch_assets.source.decode import TARGET_SAMPLE_RATE

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
# each row also gives the plan's window spec: the GPU step windows a unit it finds longer than its estimate by it
FLIGHTS_SCHEMA = {"flight_id": pl.String, "num_units": pl.Int64, "audio_s": pl.Float64, "window_seconds": pl.Float64,
                  "window_overlap_s": pl.Float64}
DEFAULT_WINDOWS = WindowSpec()
# A length the container does not state (`duration_estimated`) is planned at this many times its estimate: a stream
# up to that much longer than its estimate is decoded whole or into windows planned for it (windows past its end are
# dropped: `long_units/stitching.py`); one found longer than a window is measured by the GPU step and planned again
# in windows (`measured_lengths.py`).
ESTIMATE_MARGIN = 2.0


def _row(planned: PlannedUnit, flight_id: str, offset: int, samples: int, window: int | None = None,
         window_start_s: float | None = None) -> dict:
    return {"flight_id": flight_id, "unit_id": planned.unit_id, "position": planned.position, "offset_samples": offset,
            "num_samples": samples, "offset_s": offset / TARGET_SAMPLE_RATE, "duration_s": samples / TARGET_SAMPLE_RATE,
            "planned_duration_s": planned.duration_s, "result_class": str(ResultClass.OK), "reason": "",
            "window": window, "window_start_s": window_start_s}


def prepare_flights(
    manifest: pl.DataFrame,
    budget_s: float,
    max_units: int,
    log: Callable[[str], None] = lambda _: None,
    windows: WindowSpec = DEFAULT_WINDOWS,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(plan, flights) of the manifest's `ok` units, from their listed durations (an estimated one at
    `ESTIMATE_MARGIN` times its estimate)."""
    ok = manifest.filter(pl.col("result_class") == str(ResultClass.OK))
    estimated = (ok["duration_estimated"].fill_null(False).to_list() if "duration_estimated" in ok.columns
                 else [False] * ok.height)
    durations = [d * ESTIMATE_MARGIN if e else d for d, e in zip(ok["duration_s"], estimated, strict=True)]
    windowed = frozenset(uid for uid, d in zip(ok["unit_id"], durations, strict=True) if windows.windowed(d))
    several = {uid: n for uid, n in several_channels(ok).items()
               if uid not in windowed}  # a windowed unit flies alone whatever it counts
    plan = plan_flights(list(zip(ok["unit_id"], durations, strict=True)), budget_s, max_units, windowed, several)
    by_flight: dict[str, list[PlannedUnit]] = {}
    for planned in plan:
        by_flight.setdefault(planned.flight_id, []).append(planned)
    plan_rows, flight_rows = [], []
    spec = {"window_seconds": windows.seconds, "window_overlap_s": windows.overlap_s}
    for flight_id, units in by_flight.items():
        if units[0].unit_id in windowed:
            for window, (start_s, samples) in enumerate(planned_windows(units[0].duration_s, windows)):
                window_id = f"{flight_id}-w{window:04d}"
                plan_rows.append(_row(units[0], window_id, 0, samples, window, start_s))
                flight_rows.append({"flight_id": window_id, "num_units": 1, "audio_s": samples / TARGET_SAMPLE_RATE}
                                   | spec)
            log(f"{flight_id}: {units[0].unit_id} in {window + 1} windows")
            continue
        offset = 0
        for planned in units:
            samples = round(planned.duration_s * TARGET_SAMPLE_RATE)
            plan_rows.append(_row(planned, flight_id, offset, samples))
            offset += samples
        flight_rows.append({"flight_id": flight_id, "num_units": len(units), "audio_s": offset / TARGET_SAMPLE_RATE}
                           | spec)
    return pl.DataFrame(plan_rows, schema=PLAN_SCHEMA), pl.DataFrame(flight_rows, schema=FLIGHTS_SCHEMA)
