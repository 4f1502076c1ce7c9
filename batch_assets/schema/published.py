"""What an asset's table looks like on storage, for the analysts who read it without the pipeline.

Every table a materialization publishes (`PartitionOutputs.write_parquet`) carries its partition as a `day`
column (a Date, first), so a glob over days keeps the day: `pl.scan_parquet("storage/transcripts/*/words.parquet")`.
Times (the `*_s` columns below) are rounded to milliseconds, a `reason` with nothing to say is null, and every
column's description (`columns.py`) is written into the parquet schema as the field's `description` metadata.
The pipeline reads its own tables back without `day` (`StorageResource.read_parquet`), so the typed schemas in
`gpu/outputs/tables.py` and `ingest/` stay the tables' content.
"""

from __future__ import annotations

import datetime
import io

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from batch_assets.schema.columns import COLUMN_DESCRIPTIONS

DAY = "day"
TIME_COLUMNS = frozenset({
    "start_s", "end_s", "duration_s", "declared_duration_s", "planned_duration_s", "speech_s", "offset_s", "audio_s",
})


def published(frame: pl.DataFrame, partition: str) -> pl.DataFrame:
    """`frame` as it is published for `partition`: `day` first, times in ms, empty reasons null."""
    day = datetime.date.fromisoformat(partition)
    exprs = [pl.col(name).round(3) for name, dtype in frame.schema.items()
             if name in TIME_COLUMNS and dtype == pl.Float64]
    if "reason" in frame.columns:
        exprs.append(pl.when(pl.col("reason") == "").then(None).otherwise(pl.col("reason")).alias("reason"))
    body = frame.drop(DAY, strict=False).with_columns(exprs)
    return body.select(pl.lit(day, dtype=pl.Date).alias(DAY), pl.all())


def parquet_bytes(frame: pl.DataFrame) -> bytes:
    """The table as parquet, each column's description in its field metadata."""
    table = frame.to_arrow()
    fields = [field.with_metadata({"description": COLUMN_DESCRIPTIONS[field.name]}) if field.name in COLUMN_DESCRIPTIONS
              else field for field in table.schema]
    buffer = io.BytesIO()
    pq.write_table(table.cast(pa.schema(fields, metadata=table.schema.metadata)), buffer)
    return buffer.getvalue()


def without_day(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop(DAY, strict=False)
