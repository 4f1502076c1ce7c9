"""Daily partitions: partition YYYY-MM-DD is the audio under {source}/YYYY-MM-DD/ (any depth)."""

from __future__ import annotations

import os

import dagster as dg

PARTITIONS_START_DATE = os.environ.get("BATCH_ASSETS_PARTITIONS_START", "2026-01-01")
SAMPLE_PARTITION = "2026-01-15"

daily_partitions = dg.DailyPartitionsDefinition(start_date=PARTITIONS_START_DATE, timezone="UTC")

# A backfill hands each run up to this many consecutive partitions: the GPU step loads its models once per
# run instead of once per partition, and several runs still share out the GPUs (the `gpu` pool). All five
# assets carry the same policy so a backfill's runs cover the whole chain.
BACKFILL_PARTITIONS_PER_RUN = int(os.environ.get("BATCH_ASSETS_BACKFILL_PARTITIONS_PER_RUN", "7"))
backfill_policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=BACKFILL_PARTITIONS_PER_RUN)
