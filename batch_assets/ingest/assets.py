"""`fetched_audio` and `prepared_flights`: the listing and the flight plan that the GPU steps work from.

Both are cheap CPU steps: `fetched_audio` reads each object's size, version and header (ranged reads of its head and
tail, never its body), `prepared_flights` packs the listed durations into flights. Neither fetches nor decodes
audio: the GPU step that owns a flight does (`source/flight_audio.py`). Both write their tables under
`{storage_url}/{asset}/{partition}/` (replacing the partition's previous outputs, so reruns are idempotent) and
return only metadata.
A run may carry several partitions (a backfill under the BackfillPolicy): each is processed in turn and
gets its own materialization with its own metadata.
"""

import dagster as dg
import polars as pl
from pydantic import Field

from batch_assets.gpu.steps.run_config import refuse_a_bad_run_language
from batch_assets.ingest.flights import DECODE_BUDGET_S, MAX_UNITS_PER_FLIGHT
from batch_assets.ingest.manifest import build_manifest, read_manifest, relist
from batch_assets.ingest.measured_lengths import read_measured, valid_measurements, with_measured
from batch_assets.ingest.prepare import prepare_flights
from batch_assets.ingest.units import UnitIdCollision, escaped
from batch_assets.long_units.windows import MAX_RECORDING_SECONDS, WINDOW_OVERLAP_SECONDS, WINDOW_SECONDS, WindowSpec
from batch_assets.orchestration.guards import with_source_uris
from batch_assets.orchestration.partitions import backfill_policy, daily_partitions
from batch_assets.orchestration.steps import (
    GPU_ASSET_KEYS,
    DegradeConfig,
    class_counts,
    guard_degradation,
    lease_refusals_fail,
    lease_wait_field,
    partition_lease,
    preflight,
    written_later_in_run,
)
from batch_assets.schema.columns import table_schema
from batch_assets.settings import current_settings
from batch_assets.source.fetch import DEFAULT_RETRIES, RetryPolicy
from batch_assets.storage.lease import PartitionLease
from batch_assets.storage.resource import StorageResource

GROUP = "ingest"
# A new manifest with fewer than this share of the previous one's units is refused unless `allow_shrink`.
SHRINK_GUARD_FRACTION = current_settings().shrink_guard_fraction


class FetchConfig(DegradeConfig):
    max_recording_seconds: float = Field(
        default=MAX_RECORDING_SECONDS, gt=0,
        description="Safety limit only: longer units are classed too_long (long units are processed in windows: "
        "prepared_flights' max_unit_seconds)")
    fetch_concurrency: int = Field(default=8, description="Objects whose headers are read at once (threads)")
    retry_attempts: int = Field(default=DEFAULT_RETRIES.attempts, description="Attempts per object read (its header "
                                "here, the whole object in the GPU step) before fetch_failed")
    retry_base_delay_seconds: float = Field(default=DEFAULT_RETRIES.base_delay_s,
                                            description="Backoff: base * 2^attempt")
    lease_wait_seconds: float = lease_wait_field()
    allow_shrink: bool = Field(
        default=False,
        description="Replace the partition's results even if the source now lists far fewer units than they have "
        "(below shrink_guard_fraction, or none). Off: such a run fails and keeps the current results.",
    )
    shrink_guard_fraction: float = Field(
        default=SHRINK_GUARD_FRACTION, ge=0.0, le=1.0,
        description="Refuse a new manifest with fewer than this share of the current one's units (env default "
        "BATCH_ASSETS_SHRINK_GUARD_FRACTION, 0.5)",
    )

    units: list[str] = Field(
        default=[], description="List again only these objects (relative keys: new or changed since the day was "
        "listed; the late-audio sensor's runs) and keep every other row of the current manifest. Empty: list the "
        "whole day")

    @property
    def retries(self) -> RetryPolicy:
        return RetryPolicy(self.retry_attempts, self.retry_base_delay_seconds)


class PrepareConfig(DegradeConfig):
    decode_budget_seconds: float = Field(default=DECODE_BUDGET_S,
                                         description="Audio seconds per flight (shared decode budget)")
    max_units_per_flight: int = Field(default=MAX_UNITS_PER_FLIGHT)
    max_unit_seconds: float = Field(default=WINDOW_SECONDS, description="Longest audio processed in one piece: a "
                                    "longer unit is decoded, diarized and transcribed in windows of this length (whole "
                                    "seconds), its speakers linked across them")
    window_overlap_seconds: float = Field(default=WINDOW_OVERLAP_SECONDS, description="How much each window overlaps "
                                          "the next (whole seconds, at most a quarter of max_unit_seconds)")
    lease_wait_seconds: float = lease_wait_field()


def window_spec(config: PrepareConfig) -> WindowSpec:
    try:
        return WindowSpec(config.max_unit_seconds, config.window_overlap_seconds)
    except ValueError as error:
        raise dg.Failure(f"{error} (ops.prepared_flights.config)", allow_retries=False) from None


@dg.asset(
    partitions_def=daily_partitions,
    group_name=GROUP,
    kinds={"python", "s3"},
    backfill_policy=backfill_policy,
    retry_policy=dg.RetryPolicy(max_retries=2, delay=10, backoff=dg.Backoff.EXPONENTIAL),
)
def fetched_audio(context: dg.AssetExecutionContext, config: FetchConfig,
                  storage: StorageResource) -> dg.MaterializeResult:
    """The partition's manifest: every audio object under `{source}/{partition}/`, once, with a result class.

    Listed recursively and sorted; each object's size and storage version are recorded and its rate, channels and
    duration read from its header (ranged reads of its head and tail, with retries: `source/header_probe.py`); no
    object is downloaded whole. Bad objects get a class and a reason instead of failing the partition.
    A source root that does not exist, or an output root that refuses writes, fails the step at once.
    A partition whose source now lists far fewer units than its current results (none, or under
    `shrink_guard_fraction`) is refused, keeping those results, unless the run config says:

    ```yaml
    ops:
      fetched_audio:
        config: {allow_shrink: true}
    ```

    With `units` (relative keys: what the late-audio sensor's runs set, `orchestration/late_audio.py`), only those
    objects are listed and described again and every other row of the current manifest is kept.
    A `gpu_section` language no ASR model hears fails it first, before anything is fetched.
    """
    refuse_a_bad_run_language(context.run.run_config)
    preflight(context, storage, source=True)
    for partition in context.partition_keys:
        context.add_asset_metadata(fetch_partition(context, config, storage, partition), partition_key=partition)
    return dg.MaterializeResult()


def fetch_partition(context: dg.AssetExecutionContext, config: FetchConfig, storage: StorageResource,
                    partition: str) -> dict:
    keep = written_later_in_run(context, ("prepared_flights", *GPU_ASSET_KEYS))
    lease = partition_lease(context, storage, partition)
    with lease_refusals_fail(), lease.held(config.lease_wait_seconds, context.log.warning, release=not keep):
        return _fetch_partition(context, config, storage, partition, lease)


def _fetch_partition(context: dg.AssetExecutionContext, config: FetchConfig, storage: StorageResource, partition: str,
                     lease: PartitionLease) -> dict:
    source = storage.source_partition_url(partition)
    fs, path = storage.filesystem(source)
    current = current_manifest(storage, partition)
    if config.units and current is None:
        raise dg.Failure(f"{partition}: no manifest yet, so no rows to keep: run the whole day (without "
                         "ops.fetched_audio.config.units)", allow_retries=False)
    try:
        if config.units:
            manifest, skipped = relist(fs, path, current, config.units, config.max_recording_seconds,
                                       config.fetch_concurrency, config.retries)
        else:
            manifest, skipped = build_manifest(fs, path, config.max_recording_seconds, config.fetch_concurrency,
                                               config.retries)
    except UnitIdCollision as error:  # two keys, one id (a sha256 collision): nothing was read or written
        raise dg.Failure(description=f"{partition}: {error}; rename one of the objects", allow_retries=False) from None
    previous = None if current is None else len(current)
    shrinks = previous is not None and previous > 0 and (
        len(manifest) == 0 or len(manifest) < config.shrink_guard_fraction * previous)
    if shrinks and not config.allow_shrink:
        raise dg.Failure(
            description=f"{partition}: the source {source} lists {len(manifest)} units, but the partition's current "
            f"results have {previous}. Nothing was written: the current tables and arrays are kept. If the source is "
            "wrong or the uploads have not landed yet, fix BATCH_ASSETS_SOURCE_URL or wait; if the partition really "
            "shrank, rerun with run config `ops: {fetched_audio: {config: {allow_shrink: true}}}`.",
            metadata={"source": source, "previous_units": previous, "new_units": len(manifest),
                      "shrink_guard_fraction": config.shrink_guard_fraction},
            allow_retries=False,
        )
    if shrinks:
        context.log.warning(f"{partition}: allow_shrink: replacing {previous} units with {len(manifest)}")
    guard_degradation(context, config, storage, partition, manifest, "fetched_audio")
    if len(manifest) == 0:
        context.log.warning(f"{partition}: no audio under {source}")
    with storage.replace_partition("fetched_audio", partition, fence=lease.check) as outputs:
        uri = outputs.write_parquet(manifest, "manifest")
        outputs.write_parquet(skipped, "skipped")
    for row in skipped.iter_rows(named=True):
        context.log.warning(f"{partition}: skipped {escaped(row['relative_key'])}: {row['reason']}")
    ok = manifest.filter(pl.col("result_class") == "ok")
    return {
        "units": len(manifest),
        "units_by_class": class_counts(manifest),
        "audio_hours_ok": round(float(ok["duration_s"].sum() or 0.0) / 3600, 4),
        "non_audio_objects_skipped": len(skipped),
        # what listing read of the objects' bodies: headers only (source/header_probe.py)
        "header_bytes_read": int(manifest["probe_bytes"].sum() or 0),
        "header_bytes_read_max_per_object": int(manifest["probe_bytes"].max() or 0),
        "source": dg.MetadataValue.path(source),
        "previous_units": previous if previous is not None else "none (first materialization)",
        "relisted_units": len(config.units) if config.units else "all (the whole day listed)",
        "manifest": dg.MetadataValue.path(uri),
        "dagster/column_schema": table_schema(dict(manifest.schema)),
        "dagster/row_count": len(manifest),
    }


@dg.asset(
    partitions_def=daily_partitions,
    group_name=GROUP,
    deps=[fetched_audio],
    kinds={"python"},
    backfill_policy=backfill_policy,
    retry_policy=dg.RetryPolicy(max_retries=2, delay=10, backoff=dg.Backoff.EXPONENTIAL),
)
def prepared_flights(context: dg.AssetExecutionContext, config: PrepareConfig,
                     storage: StorageResource) -> dg.MaterializeResult:
    """The flight plan: the `ok` units packed into flights under the decode budget, from their listed durations.

    Writes the plan (`plan.parquet`: each unit's flight, position and planned length) and `flights.parquet`; no
    audio. The GPU step that owns a flight fetches and decodes its units (`source/flight_audio.py`), holding the
    flights within the budget. A unit longer than `max_unit_seconds` is planned as overlapped windows, a flight each
    (`batch_assets/long_units/windows.py`), decoded streaming into them, so memory is bounded whatever its length.
    """
    preflight(context, storage)
    for partition in context.partition_keys:
        context.add_asset_metadata(prepare_partition(context, config, storage, partition), partition_key=partition)
    return dg.MaterializeResult()


def current_manifest(storage: StorageResource, partition: str) -> pl.DataFrame | None:
    """The partition's current manifest (what the shrink guard compares with, and what a run listing only some
    objects keeps the other rows of), or None when it has none yet."""
    try:
        return read_manifest(storage, partition)
    except FileNotFoundError:
        return None


def prepare_partition(context: dg.AssetExecutionContext, config: PrepareConfig, storage: StorageResource,
                      partition: str) -> dict:
    keep = written_later_in_run(context, GPU_ASSET_KEYS)
    lease = partition_lease(context, storage, partition)
    with lease_refusals_fail(), lease.held(config.lease_wait_seconds, context.log.warning, release=not keep):
        return _prepare_partition(context, config, storage, partition, lease)


def _prepare_partition(context: dg.AssetExecutionContext, config: PrepareConfig, storage: StorageResource,
                       partition: str, lease: PartitionLease) -> dict:
    manifest = read_manifest(storage, partition)
    measured = valid_measurements(manifest, read_measured(storage, partition))  # lengths a GPU step decoded
    plan, flights = prepare_flights(with_measured(manifest, measured), budget_s=config.decode_budget_seconds,
                                    max_units=config.max_units_per_flight, log=context.log.info,
                                    windows=window_spec(config))
    with storage.replace_partition("prepared_flights", partition, fence=lease.check) as outputs:
        guard_degradation(context, config, storage, partition, with_source_uris(plan, manifest), "prepared_flights")
        plan_uri = outputs.write_parquet(plan, "plan")
        outputs.write_parquet(flights, "flights")
    windowed = plan.filter(pl.col("window").is_not_null())
    units = plan.unique("unit_id", keep="first", maintain_order=True)
    return {
        "flights": len(flights),
        "units_planned": units.height,
        "units_by_class": class_counts(units) if len(units) else {},
        "audio_hours": round(float(flights["audio_s"].sum() or 0.0) / 3600, 4),  # windows' overlaps counted twice
        "decode_budget_seconds": config.decode_budget_seconds,
        "windowed_units": windowed["unit_id"].n_unique(),  # longer than max_unit_seconds: processed in windows
        "windows": len(windowed),
        "max_unit_seconds": config.max_unit_seconds,
        "plan": dg.MetadataValue.path(plan_uri),
        "dagster/column_schema": table_schema(dict(plan.schema)),
        "dagster/row_count": len(plan),
    }
