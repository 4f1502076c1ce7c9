"""The daily schedule: every day at 06:00 UTC, transcribe yesterday's partition (the last complete day).

Six hours after midnight leave most late uploads time to land (the late-audio sensor, `late_audio.py`, picks up
the rest); partitions are UTC days, so the hour is too.
The schedule is built from the partitioned job, so each tick requests exactly one partition key and a
run that is launched twice for the same tick is deduplicated by Dagster (same run key).
Off by default in a local `dagster dev`; deployments switch it on with BATCH_ASSETS_SCHEDULE_RUNNING=true
(the Helm values do).
"""

import dagster as dg

from batch_assets.orchestration.jobs import transcribe_partition_job
from batch_assets.settings import current_settings

SCHEDULE_HOUR_UTC = 6

daily_transcription_schedule = dg.build_schedule_from_partitioned_job(
    transcribe_partition_job,
    name="daily_transcription",
    hour_of_day=SCHEDULE_HOUR_UTC,
    minute_of_hour=0,
    description=f"Yesterday's partition, every day at {SCHEDULE_HOUR_UTC:02d}:00 UTC",
    default_status=(
        dg.DefaultScheduleStatus.RUNNING
        if current_settings().schedule_running
        else dg.DefaultScheduleStatus.STOPPED
    ),
)
