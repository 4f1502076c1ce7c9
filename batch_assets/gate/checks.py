"""Asset checks on `transcripts`, for every partition.

- every unit of `fetched_audio` is accounted for exactly once in `transcripts`, and not every one went unread
  (`fetch_failed` or `changed_since_listed`: a day whose source could not be read as listed fails, and alerts);
- (WARN) the partition had audio to transcribe: an empty or all-rejected day materializes, visibly;
- no words on silent units;
- the gate against a baseline's outputs for the same partition: this check exists only when a baseline
  storage root is configured at load (`BATCH_ASSETS_BASELINE_URL`), so the UI never shows a gate as
  passed that did not run; if the `baseline` resource is emptied in the launchpad, it fails, saying so.

A run that carries several partitions (a backfill) checks each of them; the check passes only if every
partition passes, and its metadata names the partitions that did not.
"""

import collections

import dagster as dg
import polars as pl
from pydantic import Field

from batch_assets.gate.compare import gate
from batch_assets.ingest.manifest import read_manifest
from batch_assets.orchestration.partitions import daily_partitions
from batch_assets.schema.results import UNREAD_CLASSES
from batch_assets.settings import current_settings
from batch_assets.storage.resource import StorageResource


def each_partition(
    context: dg.AssetCheckExecutionContext, check_one, severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
) -> dg.AssetCheckResult:
    """Run `check_one(partition) -> (passed, metadata)` for every partition of the run.

    One partition: its result. Several (a backfill run): each partition's evaluation is recorded against
    that partition (so the UI shows every backfilled partition's check), and the step's own result is
    the summary, passing only if every partition passed.
    """
    partitions = list(context.partition_keys)
    results = {partition: check_one(partition) for partition in partitions}
    if len(partitions) == 1:
        passed, metadata = results[partitions[0]]
        return dg.AssetCheckResult(passed=passed, metadata=metadata, severity=severity)
    spec = context.check_specs[0]
    for partition, (passed, metadata) in results.items():
        context.op_execution_context.log_event(dg.AssetCheckEvaluation(
            asset_key=spec.asset_key, check_name=spec.name, passed=passed, metadata=metadata, partition=partition,
            severity=severity,
        ))
    failed = [p for p, (passed, _) in results.items() if not passed]
    return dg.AssetCheckResult(passed=not failed, metadata={"partitions": partitions, "failed_partitions": failed},
                               severity=severity)


class BaselineResource(dg.ConfigurableResource):
    """Where a baseline run's outputs live (an fsspec storage root); empty means no baseline."""

    storage_url: str = Field(default="",
                             description="A storage root holding a baseline run's outputs; empty: no baseline")
    exact: bool = Field(default=False,
                        description="Also hold every published column (decisions identical, scores and embeddings "
                                    "within their bounds), as for a run that differs from its baseline only by levers")

    def storage_like(self, storage: StorageResource) -> StorageResource | None:
        if not self.storage_url:
            return None
        return storage.model_copy(update={"storage_url": self.storage_url})


@dg.asset_check(asset="transcripts", partitions_def=daily_partitions, blocking=True,
                description="Every fetched_audio unit appears exactly once in transcripts, and not every one went "
                            "unread (fetch_failed or changed_since_listed: the source could not be read as listed)")
def units_accounted_for(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    return each_partition(context, lambda partition: _accounted_for(storage, partition))


def _accounted_for(storage: StorageResource, partition: str) -> tuple[bool, dict]:
    manifest = read_manifest(storage, partition)
    units = storage.read_parquet("transcripts", partition, "units")
    expected, found = set(manifest["unit_id"]), units["unit_id"].to_list()
    duplicates = sorted(u for u, n in collections.Counter(found).items() if n > 1)
    missing, extra = sorted(expected - set(found)), sorted(set(found) - expected)
    unread = units.filter(pl.col("result_class").is_in([str(c) for c in UNREAD_CLASSES])).height
    everything_unread = units.height > 0 and unread == units.height
    return not (duplicates or missing or extra or everything_unread), {
        "units": len(expected), "missing": missing[:20], "extra": extra[:20], "duplicates": duplicates[:20],
        "unread": unread,
    } | ({"problem": f"all {unread} units went unread (fetch_failed or changed_since_listed): the source could not "
                     "be read as listed; the reasons are in transcripts/units. The next run, or the late-audio "
                     "sensor, reads them again"} if everything_unread else {})


@dg.asset_check(asset="transcripts", partitions_def=daily_partitions,
                description="WARN: the partition had audio to transcribe (fails for an empty or all-rejected day)")
def partition_has_audio(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    return each_partition(context, lambda partition: _has_audio(storage, partition), dg.AssetCheckSeverity.WARN)


def _has_audio(storage: StorageResource, partition: str) -> tuple[bool, dict]:
    manifest = read_manifest(storage, partition)
    units = storage.read_parquet("transcripts", partition, "units")
    processed = units.filter(pl.col("speech_s").is_not_null()).height  # units the GPU section ran VAD on
    return processed > 0, {
        "source": dg.MetadataValue.path(storage.source_partition_url(partition)),
        "units": len(manifest), "units_processed": processed,
        "units_by_class": dict(sorted(collections.Counter(units["result_class"].to_list()).items())),
    }


@dg.asset_check(asset="transcripts", partitions_def=daily_partitions, blocking=True,
                description="No words on units classed silent")
def no_words_on_silent_units(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    return each_partition(context, lambda partition: _silent_without_words(storage, partition))


def _silent_without_words(storage: StorageResource, partition: str) -> tuple[bool, dict]:
    units = storage.read_parquet("transcripts", partition, "units")
    words = storage.read_parquet("transcripts", partition, "words")
    silent = units.filter(pl.col("result_class") == "silent")["unit_id"]
    offending = words.filter(pl.col("unit_id").is_in(silent.implode()))
    return offending.is_empty(), {"silent_units": len(silent), "words_on_silent_units": offending.height}


@dg.asset_check(asset="transcripts", partitions_def=daily_partitions,
                description="The gate against a baseline run's outputs, when a baseline storage root is configured")
def gate_against_baseline(
    context: dg.AssetCheckExecutionContext, storage: StorageResource, baseline: BaselineResource
) -> dg.AssetCheckResult:
    baseline_storage = baseline.storage_like(storage)

    def gate_one(partition: str) -> tuple[bool, dict]:
        if baseline_storage is None:
            return False, {"baseline": "none configured: set BATCH_ASSETS_BASELINE_URL "
                                       "(or the baseline resource's storage_url)"}
        result = gate(baseline_storage, storage, [partition], exact=baseline.exact)
        return result.passed, {
            "baseline": baseline.storage_url, "table": dg.MetadataValue.md(f"```\n{result.table()}\n```"),
        } | {k: v for k, v in result.as_dict().items() if k != "partitions"}

    return each_partition(context, gate_one)


BASELINE_CONFIGURED = bool(current_settings().baseline_url)
transcripts_checks = [units_accounted_for, partition_has_audio, no_words_on_silent_units,
                      *([gate_against_baseline] if BASELINE_CONFIGURED else [])]
