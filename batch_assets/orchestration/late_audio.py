"""The late-audio sensor: a published day whose source gained or changed objects gets a run of just those units.

Why: the 06:00 UTC schedule transcribes a day once; an upload that lands later, or a file sent again, stays out of
the tables unless someone reruns the day. Every BATCH_ASSETS_LATE_AUDIO_INTERVAL_SECONDS (120) the sensor lists
each day whose `transcripts` were materialized in the last BATCH_ASSETS_LATE_AUDIO_DAYS (7) days, by
materialization time (a backfilled day counts), and compares the listing with the day's manifest and published
units (`ingest/late_audio.py`). A day with new or changed objects gets one run of `transcribe_partition` that lists
only those objects again (`fetched_audio`'s `units`) and transcribes only those units (`gpu_section`'s `units`):
every other row of the day is kept as it was. Once per change: the run key names the objects and their versions
(Dagster launches a run key once) and the cursor records it, so a restart of the daemon asks for nothing twice and a
run that failed is not asked for again until the objects change (its failure is posted: `orchestration/alerts.py`).
A day with a run in flight (queued or started) waits for the next tick. Objects gone from a published day are
reported in the tick and queued for the alert webhook once per set of gone objects (`orchestration/alerts.py`:
`deliver_alerts` posts them, so no post waits in this tick); their rows stay until someone reruns the whole day.

Each tick lists for at most `LISTING_BUDGET_S`; the days it did not reach come first on the next tick. Measured
listing throughput: docs/operations.md (benchmarks/late_audio_listing.py).
"""

from __future__ import annotations

import json
import time

import dagster as dg

from batch_assets.ingest.late_audio import LateChanges, late_changes, list_versions
from batch_assets.ingest.manifest import read_manifest
from batch_assets.orchestration.alerts import STARTS_WITH, run_days, sensor_status, tell
from batch_assets.orchestration.jobs import transcribe_partition_job
from batch_assets.settings import current_settings
from batch_assets.storage.resource import StorageResource

LISTING_BUDGET_S = 40.0  # under the daemon's 60 s sensor timeout
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
LATE_TAG = "batch_assets/late_audio"
SHOWN = 10  # object keys named in a tick's line or a message


def recently_published(instance, days: int, now: float) -> list[str]:
    """Days whose `transcripts` were materialized in the last `days` days, newest day first."""
    found, cursor = set(), None
    while True:
        result = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("transcripts"), after_timestamp=now - days * 86400),
            limit=1000, cursor=cursor)
        found |= {r.partition_key for r in result.records if r.partition_key}
        if not result.has_more:
            return sorted(found, reverse=True)
        cursor = result.cursor


def days_in_flight(instance) -> list[tuple[str, str]]:
    """(first, last) day of each queued or started run (a backfill run: its whole range)."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT))
    return [days for days in (run_days(run.tags) for run in runs) if days is not None]


def day_changes(storage: StorageResource, day: str) -> LateChanges | None:
    """The day's late changes; None when it has no manifest or no published units to compare with."""
    try:
        manifest = read_manifest(storage, day)
        units = storage.read_parquet("transcripts", day, "units")
        published = dict(zip(units["unit_id"], units["result_class"], strict=True))
    except FileNotFoundError:
        return None
    fs, path = storage.filesystem(storage.source_partition_url(day))
    return late_changes(day, list_versions(fs, path), manifest, published)


def late_run_request(changes: LateChanges) -> dg.RunRequest:
    """One run of the day's job: list again and transcribe only the new and changed objects."""
    units = changes.units
    return dg.RunRequest(
        run_key=changes.run_key, partition_key=changes.partition,
        run_config={"ops": {"fetched_audio": {"config": {"units": units}},
                            "gpu_section": {"config": {"units": units}}}},
        tags={LATE_TAG: f"{len(changes.new)} new, {len(changes.changed)} changed"})


def _keys(keys: tuple[str, ...]) -> str:
    return ", ".join(keys[:SHOWN]) + (f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else "")


def gone_text(changes: LateChanges) -> str:
    return (f"batch_assets: {len(changes.gone)} object(s) gone from the source of published day {changes.partition}: "
            f"{_keys(changes.gone)}. Their rows are kept in the tables; rerun the whole day to drop them (the shrink "
            "guard applies), or put the objects back.")


@dg.sensor(name="late_audio", job=transcribe_partition_job,
           minimum_interval_seconds=current_settings().late_audio_interval_seconds, default_status=sensor_status(),
           description=f"Lists the days published in the last BATCH_ASSETS_LATE_AUDIO_DAYS "
           f"({current_settings().late_audio_days}) days every BATCH_ASSETS_LATE_AUDIO_INTERVAL_SECONDS "
           f"({current_settings().late_audio_interval_seconds}); new or changed objects get one run of just those "
           f"units, objects gone are reported and posted. {STARTS_WITH}")
def late_audio_sensor(context: dg.SensorEvaluationContext, storage: StorageResource):
    state = json.loads(context.cursor) if context.cursor else {}
    requested, told = state.get("requested", {}), state.get("gone", {})
    now = time.time()
    days = recently_published(context.instance, current_settings().late_audio_days, now)
    waiting = [d for d in state.get("waiting", []) if d in days]  # not reached last tick: first now
    order = waiting + [d for d in days if d not in waiting]
    busy = days_in_flight(context.instance)
    requests, lines, listed, left = [], [], 0, []
    started = time.monotonic()
    for i, day in enumerate(order):
        if time.monotonic() - started > LISTING_BUDGET_S:
            left = order[i:]
            break
        if any(first <= day <= last for first, last in busy):
            lines.append(f"{day}: a run is in flight, next tick")
            continue
        changes = day_changes(storage, day)
        if changes is None:
            continue
        listed += changes.listed
        if changes.units and requested.get(day) != changes.run_key:
            requests.append(late_run_request(changes))
            requested[day] = changes.run_key
            lines.append(f"{changes.describe()}: run asked for {_keys(tuple(changes.units))}")
        if changes.gone and told.get(day) != changes.gone_key:
            tell(context.log.warning, storage, f"gone {day} {changes.gone_key}", gone_text(changes))
            told[day] = changes.gone_key
        if changes.gone:
            lines.append(f"{day}: gone from the source, rows kept: {_keys(changes.gone)}")
    summary = (f"listed {listed} audio objects of {len(order) - len(left)} day(s) in "
               f"{time.monotonic() - started:.1f} s" + (f"; {len(left)} day(s) next tick" if left else ""))
    for line in lines:
        context.log.info(line)
    cursor = json.dumps({"requested": {d: k for d, k in requested.items() if d in days},
                         "gone": {d: k for d, k in told.items() if d in days}, "waiting": left}, sort_keys=True)
    if requests:
        return dg.SensorResult(run_requests=requests, cursor=cursor)
    return dg.SensorResult(cursor=cursor, skip_reason="; ".join([summary, *lines]) if lines else
                           f"{summary}: nothing new, changed or gone")
