"""Freshness: yesterday's `transcripts` partition published by BATCH_ASSETS_FRESHNESS_DEADLINE (09:00 UTC), checked.

Why: a day nobody watches can go missing silently: the schedule did not fire, its run was refused by a guard or
failed past its retries. Dagster's time-partition freshness check says so on the asset's page: once the day's
deadline has passed, it fails unless the last complete day (yesterday, in UTC) has a materialization; severity
ERROR, so `alert_failed_checks` (`orchestration/alerts.py`) posts the miss. Only its sensor evaluates it (the job
leaves it out: a run of an older day would fail it again while yesterday is missing), looking every
`FRESHNESS_SENSOR_INTERVAL_S`: it launches the check when it has never run, when a pass could be overdue again, and
after a failure once `transcripts` has been materialized since (Dagster's rule). Dagster marks these two builders
superseded by `FreshnessPolicy`, whose misses do not become a check an open-source deployment can alert on; the
warning is filtered here, by message.
"""

from __future__ import annotations

import warnings

import dagster as dg

from batch_assets.orchestration.alerts import STARTS_WITH, sensor_status
from batch_assets.settings import current_settings

FRESHNESS_SENSOR_INTERVAL_S = 300
warnings.filterwarnings("ignore", message=r".*(build_time_partition_freshness_checks|build_sensor_for_freshness_"
                        r"checks).*", category=dg.SupersessionWarning)


def deadline_cron(deadline: str) -> str:
    """'HH:MM' (UTC) -> the cron expression of that time every day."""
    hour, minute = deadline.split(":")
    return f"{int(minute)} {int(hour)} * * *"


DEADLINE = current_settings().freshness_deadline
transcripts_freshness_checks = dg.build_time_partition_freshness_checks(
    assets=[dg.AssetKey("transcripts")], deadline_cron=deadline_cron(DEADLINE), timezone="UTC",
    severity=dg.AssetCheckSeverity.ERROR)
_dagster_sensor = dg.build_sensor_for_freshness_checks(
    freshness_checks=transcripts_freshness_checks, name="transcripts_freshness")


@dg.sensor(name="transcripts_freshness", minimum_interval_seconds=FRESHNESS_SENSOR_INTERVAL_S,
           asset_selection=dg.AssetSelection.checks(*transcripts_freshness_checks), default_status=sensor_status(),
           description=f"Evaluates the freshness check of transcripts: yesterday's partition published by {DEADLINE} "
           f"UTC (BATCH_ASSETS_FRESHNESS_DEADLINE); a miss fails the check, which alert_failed_checks posts. "
           f"{STARTS_WITH}")
def transcripts_freshness_sensor(context: dg.SensorEvaluationContext):
    """Dagster's freshness sensor, invoked as it is (its cursor is this sensor's), under our name and description."""
    return _dagster_sensor(context)
