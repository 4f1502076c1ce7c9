"""Step code every asset package shares: the partition lease, the preflight, the degrade guard, class counts.

`ingest/assets.py`, `gpu/assets.py` and `exports/assets.py` each take a partition's lease, check storage before
any work and, where they class units, run the degrade guard; this is that code, once, so that no asset module
imports another.
"""

import collections
import contextlib
from collections.abc import Iterator

import dagster as dg
import polars as pl
from pydantic import Field

from batch_assets.orchestration.dead_runs import free_dead_runs, record_process_identity
from batch_assets.orchestration.guards import degrade_problem, systemic_problem
from batch_assets.settings import current_settings
from batch_assets.storage.lease import LeaseHeld, LeaseLost, PartitionLease
from batch_assets.storage.resource import StorageConfigError, StorageResource

GPU_ASSET_KEYS = ("vad_scores", "diarization", "transcripts")
# More than this share of the units with transcripts becoming fetch_failed/failed/changed_since_listed is refused.
DEGRADE_GUARD_FRACTION = current_settings().degrade_guard_fraction


class DegradeConfig(dg.Config):
    """The degrade guard's settings (`batch_assets/orchestration/guards.py`), on every step that classes units."""

    allow_degrade: bool = Field(
        default=False,
        description="Publish even if more than degrade_guard_fraction of the units with transcripts would become "
        "fetch_failed, failed or changed_since_listed, or (a first-time day) every unit fails for one reason. Off: "
        "such a run fails and keeps the current results.",
    )
    degrade_guard_fraction: float = Field(
        default=DEGRADE_GUARD_FRACTION, ge=0.0, le=1.0,
        description="Refuse results that leave more than this share of the units with transcripts unread or "
        "unprocessed (env default BATCH_ASSETS_DEGRADE_GUARD_FRACTION, 0.5)",
    )


def previous_units(storage: StorageResource, partition: str) -> pl.DataFrame | None:
    """The partition's current transcripts units (what a run would replace), or None when it has none yet."""
    try:
        return storage.read_parquet("transcripts", partition, "units")
    except FileNotFoundError:
        return None


def guard_degradation(context, config: DegradeConfig, storage: StorageResource, partition: str, new: pl.DataFrame,
                      op: str) -> None:
    """Fail before writing (not retried) when `new` (rows with source_uri, result_class, reason) would publish a
    degraded or systemically failed partition, unless `allow_degrade`; `op` names where to set it."""
    previous = previous_units(storage, partition)
    degraded = degrade_problem(previous, new, config.degrade_guard_fraction)
    systemic = systemic_problem(new) if previous is None else None
    if degraded is None and systemic is None:
        return
    if degraded is not None:
        what = (f"{degraded.describe()}, over the degrade guard's {config.degrade_guard_fraction:.0%}. A storage or "
                "device fault (a cold storage class, a revoked key or KMS grant, a broken GPU) looks like this, not "
                "the audio")
    else:
        what = f"{systemic} (a first-time day): a configuration or system fault, not the audio"
    if config.allow_degrade:
        context.log.warning(f"{partition}: allow_degrade: publishing anyway: {what}")
        return
    raise dg.Failure(
        description=f"{partition}: {what}. Nothing was published: the current tables and arrays are kept as they are "
        "(GPU work this run committed is kept apart, for a forced rerun to reuse). Fix the fault "
        f"and rerun; to publish these results anyway, rerun with run config `ops: {{{op}: {{config: {{allow_degrade: "
        "true}}}}}` or `batch-assets run --allow-degrade`.",
        metadata={"degraded_units": degraded.degraded if degraded else len(new),
                  "units_with_transcripts": degraded.with_words if degraded else 0,
                  "degrade_guard_fraction": config.degrade_guard_fraction,
                  "reasons": [r for r, _ in degraded.reasons] if degraded else [systemic]},
        allow_retries=False,
    )


def lease_wait_field():
    return Field(default=900.0, ge=0, description="How long to wait for another live run writing the partition before "
                 "failing with its name (0: fail at once)")


def partition_lease(context, storage: StorageResource, partition: str) -> PartitionLease:
    """This run's lease on a partition: held by the run id, free once the holder run is known to be finished."""
    instance = context.instance

    def holder_alive(run_id: str) -> bool | None:
        run = instance.get_run_by_id(run_id)
        return None if run is None else not run.is_finished

    return PartitionLease(storage, partition, holder=context.run.run_id, holder_alive=holder_alive)


@contextlib.contextmanager
def lease_refusals_fail() -> Iterator[None]:
    """The lease's refusals fail the step, not retried: a lease another live run still held after
    `lease_wait_seconds` (`LeaseHeld`: a retry would wait that long again, twice), and a write refused by the
    lease's fencing (`LeaseLost`: another run has the partition)."""
    try:
        yield
    except (LeaseHeld, LeaseLost) as error:
        raise dg.Failure(description=str(error), allow_retries=False) from error


def written_later_in_run(context: dg.AssetExecutionContext, assets: tuple[str, ...]) -> bool:
    """Whether this run also materializes any of `assets` (later steps that keep the partition's lease)."""
    selected = context.run.asset_selection or context.job_def.asset_layer.executable_asset_keys
    return any(dg.AssetKey(asset) in selected for asset in assets)


def preflight(context: dg.AssetExecutionContext, storage: StorageResource, source: bool = False) -> None:
    """Before any work: free the pool slots of runs whose process died, and fail at once (no retry) on
    storage that cannot work, a missing source root (with `source`) or an output root refusing writes."""
    record_process_identity(context)
    free_dead_runs(context.instance, context.log.warning)
    try:
        if source:
            storage.check_source_root()
        storage.check_writable()
    except StorageConfigError as error:
        raise dg.Failure(description=str(error), allow_retries=False) from None


def class_counts(frame: pl.DataFrame) -> dict[str, int]:
    return dict(sorted(collections.Counter(frame["result_class"].to_list()).items()))
