"""The leftover listing (the body of `list_leftover_flights`): planned flights the shard steps left uncommitted.

It runs on the CPU after every shard step of the run. For each partition of the run it reads the current plan
and the root run's commits, and returns one `ShardSpec` per shard with flights left without a valid commit
(`gpu/steps/resume.py: leftover_shards`): none in an uninterrupted run but the windows of a unit a shard step found
longer than its plan's room (`ingest/measured_lengths.py`); in a re-execution from failure, the flights of
the shards whose steps Dagster did not rerun, any the plan gained since, and those committed under another
deployment (`gpu/outputs/commit_identity.py`: the `gpu` resource gives the models' identity, nothing is loaded). Each
becomes a `gpu_leftover` step (pool `gpu`, a GPU pod on Kubernetes). A partition this root run already assembled
from the same plan has none.
"""

import dagster as dg

from batch_assets.gpu.outputs.commits import FlightCommits
from batch_assets.gpu.steps.resources import GpuResource
from batch_assets.gpu.steps.resume import leftover_shards, shard_specs
from batch_assets.gpu.steps.run_config import ListConfig
from batch_assets.gpu.steps.shard_values import ShardSpec
from batch_assets.gpu.steps.shard_work import (
    assembled_from,
    read_planned_flights,
    root_run_id,
    run_switches,
    selected_units,
)
from batch_assets.ingest.manifest import read_manifest
from batch_assets.storage.resource import StorageResource


def leftover_specs(context: dg.OpExecutionContext, config: ListConfig, storage: StorageResource,
                   gpu: GpuResource) -> list[ShardSpec]:
    """One spec per shard of each of the run's partitions with planned flights still without a valid commit (made
    under this deployment's identity: `gpu/outputs/commit_identity.py`)."""
    identity = gpu.commit_identity(run_switches(config))
    specs = []
    for partition in context.partition_keys:
        manifest = read_manifest(storage, partition)
        chosen = selected_units(config.units, manifest)
        planned = read_planned_flights(storage, partition, manifest, chosen, config, gpu.routing())
        commits = FlightCommits(storage, partition, root_run_id(context), identity)
        if (done := assembled_from(commits, planned)) is not None:
            context.log.info(f"{partition}: already assembled from this plan by run {done['run_id']} of this run's "
                             "lineage: no leftover step")
            continue
        problems = commits.problems({f.flight_id: f.fingerprint for f in planned})
        groups = leftover_shards(planned, problems, config.shard_audio_seconds)
        mine = [spec for spec in shard_specs(partition, groups, planned, chosen) if spec.flights]
        if not mine:
            context.log.info(f"{partition}: all {len(planned)} planned flight(s) have a valid commit: no leftover step")
            continue
        context.log.warning(
            f"{partition}: {len(problems)} of {len(planned)} planned flight(s) without a valid commit after the shard "
            f"steps of this run (their shard steps did not run in this run, the plan changed, or they were made under "
            f"another deployment): {len(mine)} leftover GPU step(s): "
            + "; ".join(f"shard {s.shard}: {s.flights}" for s in mine))
        specs += mine
    return specs
