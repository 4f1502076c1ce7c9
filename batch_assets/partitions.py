"""Daily partitions: partition YYYY-MM-DD is the audio under {source}/YYYY-MM-DD/ (any depth)."""

from __future__ import annotations

import os

import dagster as dg

PARTITIONS_START_DATE = os.environ.get("BATCH_ASSETS_PARTITIONS_START", "2026-01-01")
SAMPLE_PARTITION = "2026-01-15"

daily_partitions = dg.DailyPartitionsDefinition(start_date=PARTITIONS_START_DATE, timezone="UTC")
