"""Daily partitions: partition YYYY-MM-DD is the audio under {source}/YYYY-MM-DD/ (any depth)."""

from __future__ import annotations

import datetime
import warnings

import dagster as dg

from batch_assets.settings import current_settings

PARTITION_FORMAT = "%Y-%m-%d"


PARTITIONS_START_DATE = current_settings().partitions_start  # BATCH_ASSETS_PARTITIONS_START
daily_partitions = dg.DailyPartitionsDefinition(start_date=PARTITIONS_START_DATE, timezone="UTC")

# A backfill hands each run up to this many consecutive partitions: the GPU step loads its models once per
# run instead of once per partition, and several runs still share out the GPUs (the `gpu` pool). All six
# assets carry the same policy so a backfill's runs cover the whole chain.
# Known and deliberate: Dagster warns (beta) at every asset that takes a backfill policy and (preview) at every
# partitioned asset check, in every process that loads the code location. Filtered here, by message, where the
# definitions that use them get their partitions and policy.
warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy` of function", category=dg.BetaWarning)
warnings.filterwarnings("ignore", message=r"Specifying a partitions_def on an AssetCheckSpec",
                        category=dg.PreviewWarning)
BACKFILL_PARTITIONS_PER_RUN = current_settings().backfill_partitions_per_run
backfill_policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=BACKFILL_PARTITIONS_PER_RUN)


class PartitionKeyError(ValueError):
    """A partition key that is not one of the daily partitions."""


def check_partition_key(key: str) -> str:
    """`key` if it is a daily partition, else an error naming the format and the range of partitions."""
    last = daily_partitions.get_last_partition_key()
    expected = (f"partitions are UTC days, YYYY-MM-DD, from {PARTITIONS_START_DATE} (BATCH_ASSETS_PARTITIONS_START) "
                f"to {last}")
    try:
        if datetime.datetime.strptime(key, PARTITION_FORMAT).strftime(PARTITION_FORMAT) != key:
            raise ValueError(key)
    except ValueError:
        raise PartitionKeyError(f"partition {key!r} is not a day: {expected}") from None
    if not PARTITIONS_START_DATE <= key <= (last or PARTITIONS_START_DATE):
        raise PartitionKeyError(f"partition {key!r} is outside the partitions: {expected}")
    return key
