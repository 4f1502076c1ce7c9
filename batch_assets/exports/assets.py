"""`transcript_exports`: every transcribed unit of a day as SRT, WebVTT, text, WhisperX JSON and RTTM files.

Downstream of `transcripts`, same daily partitions: the files are made from the published tables by the
Dagster-free `formats.py` (what `batch-assets export` writes too), under
`{storage}/transcript_exports/YYYY-MM-DD/{unit_id}.{srt,vtt,txt,json,rttm}`, with `files.parquet` listing them.
The folder is replaced as a whole (`replace_partition`), under the partition's lease. Two checks read the
files back: every exported unit has its five files and nothing else is there; the JSON's words and the
RTTM's turns are the tables' rows.
"""

import json

import dagster as dg
import polars as pl

from batch_assets.exports.formats import FORMATS, exported_units, partition_files
from batch_assets.gate.checks import each_partition
from batch_assets.orchestration.partitions import backfill_policy, daily_partitions
from batch_assets.orchestration.steps import lease_refusals_fail, lease_wait_field, partition_lease, preflight
from batch_assets.schema.columns import table_schema
from batch_assets.storage.resource import StorageResource

ASSET = "transcript_exports"
FILES_SCHEMA = {"unit_id": pl.String, "format": pl.String, "uri": pl.String, "bytes": pl.Int64}


class ExportConfig(dg.Config):
    lease_wait_seconds: float = lease_wait_field()


def read_transcripts(storage: StorageResource, partition: str) -> dict[str, pl.DataFrame]:
    """What the exports are made from: the day's units, segments and words, and the diarization's turns."""
    tables = {name: storage.read_parquet("transcripts", partition, name) for name in ("units", "segments", "words")}
    return tables | {"turns": storage.read_parquet("diarization", partition, "turns")}


def export_frames(tables: dict[str, pl.DataFrame], unit: str | None = None, formats=FORMATS) -> dict[str, str]:
    return partition_files(tables["units"], tables["segments"], tables["words"], tables["turns"], formats, unit)


@dg.asset(
    partitions_def=daily_partitions,
    deps=["transcripts"],
    group_name="exports",
    kinds={"python", "text"},
    backfill_policy=backfill_policy,
    retry_policy=dg.RetryPolicy(max_retries=2, delay=10, backoff=dg.Backoff.EXPONENTIAL),
)
def transcript_exports(context: dg.AssetExecutionContext, config: ExportConfig,
                       storage: StorageResource) -> dg.MaterializeResult:
    """Each transcribed unit's SRT and WebVTT (speaker-prefixed cues of at most 7 s and 2 lines of 42 characters),
    text turns, WhisperX-shaped JSON (segments and words with speaker and score) and RTTM (the diarization turns)."""
    preflight(context, storage)
    for partition in context.partition_keys:
        lease = partition_lease(context, storage, partition)
        with lease_refusals_fail(), lease.held(config.lease_wait_seconds, context.log.warning):
            context.add_asset_metadata(export_partition(storage, partition, lease.check), partition_key=partition)
    return dg.MaterializeResult()


def export_partition(storage: StorageResource, partition: str, fence=lambda: None) -> dict:
    tables = read_transcripts(storage, partition)
    files = export_frames(tables)
    rows = []
    with storage.replace_partition(ASSET, partition, fence=fence) as out:
        for name, text in files.items():
            data = text.encode("utf-8")
            unit_id, fmt = name.rsplit(".", 1)
            rows.append({"unit_id": unit_id, "format": fmt, "uri": out.write_file(data, name), "bytes": len(data)})
        index = pl.DataFrame(rows, schema=FILES_SCHEMA)
        index_uri = out.write_parquet(index, "files")
    units = tables["units"]
    skipped = units.filter(~pl.col("unit_id").is_in(exported_units(units)))
    first = next((name for name in files if name.endswith(".txt") and files[name]), None)
    return {
        "units_exported": len(files) // len(FORMATS),
        "files": len(files),
        "formats": list(FORMATS),
        "bytes": int(index["bytes"].sum() or 0),
        "folder": dg.MetadataValue.path(storage.output_url(ASSET, partition)),
        "files_table": dg.MetadataValue.path(index_uri),
        "units_not_exported": {r["unit_id"]: r["result_class"] for r in skipped.iter_rows(named=True)},
        "preview": dg.MetadataValue.md(f"`{first}`\n```\n{files[first][:1500]}\n```" if first else "(no words)"),
        "dagster/column_schema": table_schema(FILES_SCHEMA),
        "dagster/row_count": len(index),
    }


@dg.asset_check(asset=ASSET, partitions_def=daily_partitions, blocking=True,
                description="Every transcribed unit has its five files, and the folder holds nothing else")
def exports_cover_units(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    return each_partition(context, lambda partition: _cover(storage, partition))


def _cover(storage: StorageResource, partition: str) -> tuple[bool, dict]:
    units = storage.read_parquet("transcripts", partition, "units")
    expected = {f"{uid}.{fmt}" for uid in exported_units(units) for fmt in FORMATS} | {"files.parquet"}
    fs, root = storage.filesystem(storage.output_url(ASSET, partition))
    found = {path[len(root.rstrip("/")) + 1:] for path in fs.find(root)} if fs.exists(root) else set()
    missing, extra = sorted(expected - found), sorted(found - expected)
    return not (missing or extra), {"files": len(found), "missing": missing[:20], "extra": extra[:20]}


@dg.asset_check(asset=ASSET, partitions_def=daily_partitions, blocking=True,
                description="Each unit's JSON words and RTTM turns, read back from storage, are the tables' rows")
def exports_match_tables(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    return each_partition(context, lambda partition: _match(storage, partition))


def _match(storage: StorageResource, partition: str) -> tuple[bool, dict]:
    tables = read_transcripts(storage, partition)
    words, turns = tables["words"], tables["turns"].filter(~pl.col("exclusive"))
    different = []
    for uid in exported_units(tables["units"]):
        base = storage.output_url(ASSET, partition, uid)
        try:
            exported = json.loads(storage.read_bytes(f"{base}.json"))["word_segments"]
            lines = storage.read_bytes(f"{base}.rttm").decode().splitlines()
        except FileNotFoundError:  # exports_cover_units names it
            different.append(f"{uid}: missing")
            continue
        mine = words.filter(pl.col("unit_id") == uid).sort("word_index")
        if [(w["word"], w["start"], w["end"], w.get("speaker")) for w in exported] != [
                (r["word"], r["start_s"], r["end_s"], r["speaker"]) for r in mine.iter_rows(named=True)]:
            different.append(f"{uid}.json")
        if len(lines) != turns.filter(pl.col("unit_id") == uid).height:
            different.append(f"{uid}.rttm")
    return not different, {"units": len(exported_units(tables["units"])), "differ_from_tables": different[:20]}


exports_checks = [exports_cover_units, exports_match_tables]
