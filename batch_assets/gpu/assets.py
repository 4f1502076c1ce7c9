"""`vad_scores`, `diarization` and `transcripts`: one GPU multi-asset, its work split into shards.

The three outputs come from the same GPU work because they share the expensive state: the models on the
device and each flight's audio. A graph of five ops produces them (the day stays the partition); only the
shard and leftover steps ask for a GPU:

1. `plan_gpu_shards` (CPU): reads the day's flight plan, takes the partition's lease (one writer per
   partition, `batch_assets/storage/lease.py`), validates a `units` rerun, and groups the flights, whole and in
   plan order, into shards of at most `shard_audio_seconds`;
2. `gpu_shard`, one step per shard (Dagster dynamic outputs): pool `gpu` (sized to the GPUs), one
   `nvidia.com/gpu` pod on Kubernetes (its op tags), the cross-process device lock around the section.
   It runs the typed runner (`gpu/section/runner.py`) and commits each finished flight durably
   (`gpu/outputs/commits.py`), keyed by the run's root run id: a retry, a run retry from failure or a
   re-execution from failure reuses the valid commits;
3. `list_leftover_flights` (CPU): once every shard step that ran succeeded, lists the planned flights still
   without a valid commit (`gpu/steps/leftovers.py`: a re-execution from failure reruns only the shard steps that
   had started) and emits one `gpu_leftover` step per shard they fall in, none when nothing is left;
4. `gpu_leftover`, a GPU step like `gpu_shard` (pool, tags, retry), for those flights (`gpu/steps/resume.py`);
5. `assemble_gpu_tables` (CPU, no model): builds the three assets' tables from the commits and replaces the
   partition's tables atomically (or, for a `units` rerun, only those units' rows), records each asset's
   metadata, releases the lease and removes the step values of runs that succeeded or were re-executed
   successfully. It writes nothing while a planned flight lacks a valid commit.

A run may carry several partitions (a backfill under the BackfillPolicy): each has its own shards and its
own materializations; a GPU step loads the models once for all the shards it runs.
"""

import dagster as dg

from batch_assets.gpu.outputs.tables import tables_to_keep
from batch_assets.gpu.steps.assembly import assemble_one
from batch_assets.gpu.steps.leftovers import leftover_specs
from batch_assets.gpu.steps.resources import GpuResource
from batch_assets.gpu.steps.resume import shard_mapping_key, shard_specs, shards_of
from batch_assets.gpu.steps.run_config import (
    AssembleConfig,
    ListConfig,
    PlanConfig,
    ShardConfig,
    checked_run_language,
    gpu_section_config,
    run_hints,
)
from batch_assets.gpu.steps.shard_values import ShardReport, ShardSpec
from batch_assets.gpu.steps.shard_work import read_planned_flights, run_shard, selected_units
from batch_assets.gpu.steps.stop_requests import stop_requests
from batch_assets.ingest.manifest import read_manifest
from batch_assets.orchestration.dead_runs import record_process_identity
from batch_assets.orchestration.io_manager import VALUES_FOLDER, discard_run_values
from batch_assets.orchestration.partitions import backfill_policy, daily_partitions
from batch_assets.orchestration.steps import GPU_ASSET_KEYS, lease_refusals_fail, partition_lease, preflight
from batch_assets.settings import current_settings
from batch_assets.storage.resource import StorageResource

GROUP = "gpu"
# a failed step of the section is retried once (a device fault, a storage error: in a fresh process or pod), after
# the configured delay
GPU_RETRY = dg.RetryPolicy(max_retries=1, delay=current_settings().gpu_retry_delay_seconds)
GPU_POOL = "gpu"


def gpu_k8s_config(settings) -> dict:
    """The pod of a GPU step (k8s_job_executor): one GPU, the CPUs and memory its section and its flights' decode
    need (`BATCH_ASSETS_GPU_STEP_CPU`, `BATCH_ASSETS_GPU_STEP_MEMORY_GIB`; docs/deployment.md: sizing)."""
    memory = settings.gpu_step_memory_gib
    return {
        "container_config": {
            "resources": {
                "limits": {"nvidia.com/gpu": "1", "memory": f"{-(-memory * 4 // 3)}Gi"},
                "requests": {"nvidia.com/gpu": "1", "cpu": str(settings.gpu_step_cpu), "memory": f"{memory}Gi"},
            }
        },
        "pod_spec_config": {
            "node_selector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


GPU_K8S_CONFIG = gpu_k8s_config(current_settings())
GPU_IO = "gpu_io"  # the IO manager for the small values passed between the graph's steps


@dg.op(ins={"prepared_flights": dg.In(dg.Nothing), "fetched_audio": dg.In(dg.Nothing)},
       out=dg.DynamicOut(ShardSpec, io_manager_key=GPU_IO),
       description="Group each partition's flights into GPU shards")
def plan_gpu_shards(context: dg.AssetExecutionContext, config: PlanConfig, storage: StorageResource, gpu: GpuResource):
    selected = sorted(key.to_user_string() for key in context.selected_asset_keys)
    if selected != sorted(GPU_ASSET_KEYS):
        raise dg.Failure(f"vad_scores, diarization and transcripts are computed together: select all three (this run "
                         f"selected {selected}); to redo some units, use the `units` run config", allow_retries=False)
    partitions = context.partition_keys
    run_hints(config)  # a contradiction in them fails here, before anything is taken
    checked_run_language(config, gpu.routing())  # so does a language no ASR model hears (no model is loaded)
    preflight(context, storage)  # before any model load: storage that refuses writes fails here, at once
    if config.units and len(partitions) > 1:
        raise dg.Failure(f"`units` reruns some units of one partition; this run has {len(partitions)} partitions",
                         allow_retries=False)
    for partition in partitions:
        with lease_refusals_fail(), partition_lease(context, storage, partition).held(
                config.lease_wait_seconds, context.log.warning, release=False):
            manifest = read_manifest(storage, partition)
            chosen = selected_units(config.units, manifest)
            if chosen is not None:  # checked before any GPU work: a rerun that cannot keep the other rows does nothing
                try:
                    tables_to_keep(storage, partition, manifest, chosen)
                except ValueError as error:
                    raise dg.Failure(str(error), allow_retries=False) from error
            flights = read_planned_flights(storage, partition, manifest, chosen)
            shards = shards_of(flights, config.shard_audio_seconds)
            context.log.info(f"{partition}: {len(flights)} flights in {len(shards)} shard(s) of at most "
                             f"{config.shard_audio_seconds:.0f} audio seconds (each channel's counted)")
            for spec in shard_specs(partition, shards, flights, chosen):
                yield dg.DynamicOutput(spec, mapping_key=shard_mapping_key(partition, spec.shard))


@dg.op(
    out=dg.Out(ShardReport, io_manager_key=GPU_IO),
    pool=GPU_POOL,
    tags={"dagster-k8s/config": GPU_K8S_CONFIG},
    retry_policy=GPU_RETRY,
    description="One shard of a partition through VAD -> diarization -> ASR in the locked section, a commit per flight",
)
def gpu_shard(context: dg.OpExecutionContext, config: ShardConfig, storage: StorageResource, gpu: GpuResource,
              shard: ShardSpec) -> ShardReport:
    with stop_requests() as stops:  # a stop signal Dagster's interrupt missed still stops the step, at a safe point
        return run_shard(context, config, storage, gpu, shard, stops)


@dg.op(ins={"shards_done": dg.In(dg.Nothing)}, out=dg.DynamicOut(ShardSpec, io_manager_key=GPU_IO),
       description="List the planned flights the shard steps left without a commit, a leftover GPU step per shard")
def list_leftover_flights(context: dg.OpExecutionContext, config: ListConfig, storage: StorageResource,
                          gpu: GpuResource):
    for spec in leftover_specs(context, config, storage, gpu):  # gpu: the models' identity, nothing loaded
        yield dg.DynamicOutput(spec, mapping_key=shard_mapping_key(spec.partition, spec.shard))


@dg.op(
    out=dg.Out(ShardReport, io_manager_key=GPU_IO),
    pool=GPU_POOL,
    tags={"dagster-k8s/config": GPU_K8S_CONFIG},
    retry_policy=GPU_RETRY,
    description="Flights of one shard that no shard step committed (a re-execution's shards that never started), "
    "in the locked section, a commit per flight",
)
def gpu_leftover(context: dg.OpExecutionContext, config: ShardConfig, storage: StorageResource, gpu: GpuResource,
                 shard: ShardSpec) -> ShardReport:
    with stop_requests() as stops:
        return run_shard(context, config, storage, gpu, shard, stops, leftover=True)


@dg.op(
    ins={"reports": dg.In(list[ShardReport]), "leftover_reports": dg.In(list[ShardReport])},
    out={asset: dg.Out(dg.Nothing, is_required=False) for asset in GPU_ASSET_KEYS},
    retry_policy=GPU_RETRY,
    description="Assemble each partition's three tables from the flight commits (CPU, no model) and replace them "
    "atomically",
)
def assemble_gpu_tables(context: dg.AssetExecutionContext, config: AssembleConfig, storage: StorageResource,
                        gpu: GpuResource, reports: list[ShardReport], leftover_reports: list[ShardReport]):
    partitions = list(context.partition_keys)
    record_process_identity(context)
    for partition in partitions:
        assemble_one(context, config, storage, gpu, [r for r in [*reports, *leftover_reports]
                                                     if r.partition == partition], partition, len(partitions))
    try:  # housekeeping: never fails a step whose partitions are written
        removed = discard_run_values(storage, context.instance)
        context.log.info(f"removed the step values of {len(removed)} finished run(s) from {VALUES_FOLDER}/")
    except Exception as error:  # noqa: BLE001
        context.log.warning(f"could not remove old step values from {VALUES_FOLDER}/ ({type(error).__name__}: {error})")
    for asset in GPU_ASSET_KEYS:
        yield dg.Output(None, asset)


@dg.graph_multi_asset(
    name="gpu_section",
    outs={
        "vad_scores": dg.AssetOut(kinds={"pytorch", "parquet"}, dagster_type=dg.Nothing,
                                  description="Raw pyannote segmentation scores per unit and the speech regions "
                                              "derived from them."),
        "diarization": dg.AssetOut(kinds={"pytorch", "parquet"}, dagster_type=dg.Nothing,
                                   description="Speaker turns (with and without overlap) and one embedding per "
                                               "speaker, per unit."),
        "transcripts": dg.AssetOut(kinds={"pytorch", "parquet"}, dagster_type=dg.Nothing,
                                   description="Every unit with its final result class and text; every word with "
                                               "times and speaker."),
    },
    ins={"prepared_flights": dg.AssetIn(dagster_type=dg.Nothing), "fetched_audio": dg.AssetIn(dagster_type=dg.Nothing)},
    group_name=GROUP,
    partitions_def=daily_partitions,
    backfill_policy=backfill_policy,
    # Subsettable in Dagster's eyes, so that the UI's backfill validation of a non-subsettable multi-asset
    # (which in Dagster 1.13.27 compares the three keys' partition subsets by internal representation, and
    # refuses valid backfills depending on the process's hash seed) does not apply. The three outputs are
    # still computed together: a selection of only some of them fails at once, saying so.
    can_subset=True,
    config=gpu_section_config,
)
def gpu_section(prepared_flights, fetched_audio):
    reports = plan_gpu_shards(prepared_flights=prepared_flights, fetched_audio=fetched_audio).map(gpu_shard).collect()
    leftover_reports = list_leftover_flights(reports).map(gpu_leftover).collect()
    vad_scores, diarization, transcripts = assemble_gpu_tables(reports, leftover_reports)
    return {"vad_scores": vad_scores, "diarization": diarization, "transcripts": transcripts}


