"""`vad_scores`, `diarization` and `transcripts`: one GPU multi-asset, its work split into shards.

The three outputs come from the same GPU work because they share the expensive state: the models on the
device and each flight's audio. A graph of three steps produces them (the day stays the partition):

1. `plan_gpu_shards` (CPU): reads the day's flight plan, takes the partition's lease (one writer per
   partition, `batch_assets/lease.py`), validates a `units` rerun, and groups the flights, whole and in
   plan order, into shards of at most `shard_audio_seconds`;
2. `gpu_shard`, one step per shard (Dagster dynamic outputs): pool `gpu` (sized to the GPUs), one
   `nvidia.com/gpu` pod on Kubernetes (its op tags), the cross-process device lock around the section.
   It runs the typed runner (`gpu/runner.py`) and commits each finished flight durably
   (`gpu/commits.py`), keyed by the run's root run id: a retry, a run retry from failure or a
   re-execution from failure reuses the valid commits; in a re-execution, a shard step also takes over
   the flights of the shards Dagster does not rerun (`gpu/resume.py`);
3. `assemble_gpu_tables` (also a GPU step): once every shard step succeeded, processes any planned flight
   still without a valid commit (a re-execution that reran no shard step), builds the three assets'
   tables from the commits and replaces the partition's tables atomically (or, for a `units` rerun, only
   those units' rows), records each asset's metadata, releases the lease and removes the step values of
   runs that succeeded or were re-executed successfully.

A run may carry several partitions (a backfill under the BackfillPolicy): each has its own shards and its
own materializations; a GPU step loads the models once for all the shards it runs.
"""

import collections
import contextlib
import resource
from collections.abc import Iterable

import dagster as dg
import polars as pl
from pydantic import Field

from batch_assets import transcript_text
from batch_assets.columns import table_schema
from batch_assets.dead_runs import record_process_identity
from batch_assets.gpu.commits import FlightCommits
from batch_assets.gpu.resources import GpuResource, quarantine
from batch_assets.gpu.resume import (
    PlannedFlight,
    executing_shards,
    owned_flights,
    plan_fingerprint,
    planned_flights,
    shard_mapping_key,
)
from batch_assets.gpu.shards import plan_shards
from batch_assets.gpu.stop_requests import StopRequests, stop_requests
from batch_assets.gpu.tables import (
    TABLE_SCHEMAS,
    keep_other_units,
    tables_to_keep,
    transcript_tables,
)
from batch_assets.ingest.assets import (
    GPU_ASSET_KEYS,
    DegradeConfig,
    class_counts,
    guard_degradation,
    lease_lost_fails,
    lease_wait_field,
    partition_lease,
    preflight,
)
from batch_assets.ingest.flights import DECODE_BUDGET_S
from batch_assets.io_manager import VALUES_FOLDER, discard_run_values
from batch_assets.partitions import backfill_policy, daily_partitions
from batch_assets.settings import env_int
from batch_assets.speaker_hints import HintError, SpeakerHints, unit_hints
from batch_assets.storage import StorageResource, remove_path
from batch_assets.switches import SWITCH_DEFAULTS, SWITCHES
from batch_assets.windows import LINK_THRESHOLD, stitch, window_hints, window_pieces

GROUP = "gpu"
GPU_POOL = "gpu"
GPU_K8S_CONFIG = {
    "container_config": {
        "resources": {
            "limits": {"nvidia.com/gpu": "1", "memory": "32Gi"},
            "requests": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "24Gi"},
        }
    },
    "pod_spec_config": {
        "node_selector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


SHARD_AUDIO_SECONDS = env_int("BATCH_ASSETS_SHARD_AUDIO_SECONDS", 14400, minimum=60, maximum=10**7)
GPU_IO = "gpu_io"  # the IO manager for the small values passed between the graph's steps


def _switch_field(name: str):
    """A lever's run config field: its default and description come from the registry (`switches.py`)."""
    switch = next(s for s in SWITCHES if s.name == name)
    return Field(default=SWITCH_DEFAULTS[name], description=f"{switch.description} (env default {switch.env_var})")


class LeverConfig(dg.Config):
    """The speed levers, each a kill switch (`batch_assets/switches.py`; env defaults read at load)."""

    prepare_flight_enabled: bool = _switch_field("prepare_flight_enabled")
    vad_segmentation_reuse_enabled: bool = _switch_field("vad_segmentation_reuse_enabled")
    asr_cuda_graphs_enabled: bool = _switch_field("asr_cuda_graphs_enabled")
    embedding_shared_trunk_enabled: bool = _switch_field("embedding_shared_trunk_enabled")
    batch_across_units_enabled: bool = _switch_field("batch_across_units_enabled")
    host_overlap_enabled: bool = _switch_field("host_overlap_enabled")
    half_precision_enabled: bool = _switch_field("half_precision_enabled")
    decode_budget_seconds: float = Field(default=DECODE_BUDGET_S, description="Most audio seconds prepared ahead")
    prepare_workers: int = Field(default=1, description="Flights prepared concurrently (within the budget ahead)")


class HintsConfig(dg.Config):
    """Speaker-count hints for every unit of the partition (a unit's sidecar wins: `speaker_hints.py`)."""

    num_speakers: int | None = Field(default=None, gt=0, description="Exactly this many speakers in every unit")
    min_speakers: int | None = Field(default=None, gt=0, description="At least this many speakers in every unit")
    max_speakers: int | None = Field(default=None, gt=0, description="At most this many speakers in every unit")


def run_hints(config: HintsConfig) -> SpeakerHints:
    """The run config's hints; a contradiction fails the step at once, naming the fields."""
    try:
        return SpeakerHints(config.num_speakers, config.min_speakers, config.max_speakers)
    except HintError as error:
        raise dg.Failure(f"speaker hints in the run config: {error} (ops.gpu_section.config)", allow_retries=False) from None


def unit_speaker_hints(manifest: pl.DataFrame, hints: SpeakerHints) -> dict[str, SpeakerHints]:
    """Each unit's hints: its sidecar's (read into the manifest by `fetched_audio`), else the run's."""
    return {row["unit_id"]: unit_hints(hints, row)[0] for row in manifest.iter_rows(named=True)}


def units_field():
    return Field(default=[], description="Rerun only these units of the partition (unit_id or relative key); the other "
                 "units keep their rows. Empty: the whole partition, replaced.")


class ShardConfig(LeverConfig, HintsConfig):
    """A shard step's config: the levers and the run's speaker hints."""


class LinkConfig(dg.Config):
    speaker_link_threshold: float = Field(
        default=LINK_THRESHOLD, gt=0,
        description="A windowed unit's speakers closer than this across windows (euclidean, normalised centroids) "
        "are one voice (`batch_assets/windows.py`)")


class AssembleConfig(LeverConfig, HintsConfig, DegradeConfig, LinkConfig):
    """The assembly's config: the levers (for flights it finishes itself), the `units` of a rerun, speaker linking."""

    units: list[str] = units_field()


class PlanConfig(HintsConfig):
    units: list[str] = units_field()
    shard_audio_seconds: float = Field(
        default=SHARD_AUDIO_SECONDS, gt=0,
        description="Most audio seconds per GPU step (shard); env default BATCH_ASSETS_SHARD_AUDIO_SECONDS (14400)",
    )
    lease_wait_seconds: float = lease_wait_field()


class GpuSectionConfig(LeverConfig, PlanConfig, DegradeConfig, LinkConfig):
    """The GPU work's run config, as the launchpad shows it under `ops.gpu_section.config`:

    ```yaml
    ops:
      gpu_section:
        config:
          prepare_flight_enabled: true
          vad_segmentation_reuse_enabled: true
          asr_cuda_graphs_enabled: true
          embedding_shared_trunk_enabled: true
          batch_across_units_enabled: true
          host_overlap_enabled: true
          half_precision_enabled: false     # changes numbers: on only where the gate passes
          shard_audio_seconds: 14400        # one GPU step per 4 audio-hours
          units: []                         # or ["calls/2026/support_call.flac"]: rerun only these
          allow_degrade: false              # true: publish even if most transcribed units would become failed
          num_speakers: null                # or min_speakers / max_speakers: hints for every unit without a sidecar
          speaker_link_threshold: 0.7       # a windowed unit's speakers this close across windows are one voice
    ```
    """


@dg.config_mapping
def gpu_section_config(config: GpuSectionConfig) -> dict:
    values = config.model_dump()
    pick = lambda cls: {k: values[k] for k in cls.model_fields}  # noqa: E731
    return {"plan_gpu_shards": {"config": pick(PlanConfig)}, "gpu_shard": {"config": pick(ShardConfig)},
            "assemble_gpu_tables": {"config": pick(AssembleConfig)}}


def unit_classes_markdown(units: pl.DataFrame, rows: int = 50) -> str:
    """Each unit's class and reason, whole (the partition page's answer to "what happened to each file")."""
    lines = ["| unit_id | class | seconds | speakers | words | reason |", "|---|---|---|---|---|---|"]
    for row in units.head(rows).iter_rows(named=True):
        seconds = f"{row['duration_s']:.1f}" if row["duration_s"] is not None else "-"
        speakers = row["num_speakers"] if row["num_speakers"] is not None else "-"
        reason = (row["reason"] or "").replace("|", "/")
        lines.append(f"| {row['unit_id']} | {row['result_class']} | {seconds} | {speakers} | {row['num_words']} | {reason} |")
    if len(units) > rows:
        lines.append(f"\n{len(units) - rows} more units: see `units_table`")
    return "\n".join(lines)


def root_run_id(context) -> str:
    """The id flight commits are keyed by: the same across retries and re-executions from failure of one run."""
    return context.run.root_run_id or context.run.run_id


def selected_units(requested: Iterable[str], manifest: pl.DataFrame) -> set[str] | None:
    """The unit_ids an analyst asked to rerun (by unit_id or relative key); None means the whole partition."""
    requested = list(requested)
    if not requested:
        return None
    by_key = dict(zip(manifest["relative_key"], manifest["unit_id"], strict=True))
    ids = set(manifest["unit_id"])
    unknown = [u for u in requested if u not in ids and u not in by_key]
    if unknown:
        raise dg.Failure(f"units not in this partition's manifest (new audio? rerun the whole partition): {unknown}",
                         allow_retries=False)
    return {u if u in ids else by_key[u] for u in requested}


@dg.op(ins={"prepared_flights": dg.In(dg.Nothing), "fetched_audio": dg.In(dg.Nothing)},
       out=dg.DynamicOut(dict, io_manager_key=GPU_IO), description="Group each partition's flights into GPU shards")
def plan_gpu_shards(context: dg.AssetExecutionContext, config: PlanConfig, storage: StorageResource):
    selected = sorted(key.to_user_string() for key in context.selected_asset_keys)
    if selected != sorted(GPU_ASSET_KEYS):
        raise dg.Failure(f"vad_scores, diarization and transcripts are computed together: select all three (this run "
                         f"selected {selected}); to redo some units, use the `units` run config", allow_retries=False)
    partitions = context.partition_keys
    run_hints(config)  # a contradiction in them fails here, before anything is taken
    preflight(context, storage)  # before any model load: storage that refuses writes fails here, at once
    if config.units and len(partitions) > 1:
        raise dg.Failure(f"`units` reruns some units of one partition; this run has {len(partitions)} partitions",
                         allow_retries=False)
    for partition in partitions:
        with partition_lease(context, storage, partition).held(config.lease_wait_seconds, context.log.warning, release=False):
            manifest = storage.read_parquet("fetched_audio", partition, "manifest")
            chosen = selected_units(config.units, manifest)
            if chosen is not None:  # checked before any GPU work: a rerun that cannot keep the other rows does nothing
                try:
                    tables_to_keep(storage, partition, manifest)
                except ValueError as error:
                    raise dg.Failure(str(error), allow_retries=False) from error
            flights = read_planned_flights(storage, partition, manifest, chosen)
            shards = plan_shards([(f.flight_id, f.audio_s) for f in flights], config.shard_audio_seconds)
            seconds = {f.flight_id: f.audio_s for f in flights}
            context.log.info(f"{partition}: {len(flights)} flights in {len(shards)} shard(s) of at most "
                             f"{config.shard_audio_seconds:.0f} audio seconds")
            for index, flight_ids in enumerate(shards):
                yield dg.DynamicOutput(
                    {"partition": partition, "shard": index, "shards": len(shards), "flights": flight_ids,
                     "shard_flights": shards, "audio_s": round(sum(seconds[f] for f in flight_ids), 3),
                     "units": sorted(chosen) if chosen is not None else None},
                    mapping_key=shard_mapping_key(partition, index),
                )


def read_planned_flights(storage: StorageResource, partition: str, manifest: pl.DataFrame | None = None,
                         units: Iterable[str] | None = None) -> list[PlannedFlight]:
    """The partition's current planned flights (`gpu/resume.py`), read from `prepared_flights` (and the manifest)."""
    if manifest is None:
        manifest = storage.read_parquet("fetched_audio", partition, "manifest")
    return planned_flights(manifest, storage.read_parquet("prepared_flights", partition, "plan"),
                           storage.read_parquet("prepared_flights", partition, "flights"), units)


@dg.op(
    out=dg.Out(dict, io_manager_key=GPU_IO),
    pool=GPU_POOL,
    tags={"dagster-k8s/config": GPU_K8S_CONFIG},
    retry_policy=dg.RetryPolicy(max_retries=1, delay=30),
    description="One shard of a partition through VAD -> diarization -> ASR in the locked section, a commit per flight",
)
def gpu_shard(context: dg.OpExecutionContext, config: ShardConfig, storage: StorageResource, gpu: GpuResource,
              shard: dict) -> dict:
    with stop_requests() as stops:  # a stop signal Dagster's interrupt missed still stops the step, at a safe point
        return _run_shard(context, config, storage, gpu, shard, stops)


def _run_shard(context: dg.OpExecutionContext, config: ShardConfig, storage: StorageResource, gpu: GpuResource,
               shard: dict, stops: StopRequests) -> dict:
    record_process_identity(context)  # the dead-run check tells this process from a later one with its pid
    partition, root = shard["partition"], root_run_id(context)
    lease = partition_lease(context, storage, partition)
    commits = FlightCommits(storage, partition, root, fence=lease.check)
    with lease_lost_fails(), lease.held(log=context.log.warning, release=False, release_on_error=False):  # siblings work
        planned = {f.flight_id: f for f in read_planned_flights(storage, partition, units=shard["units"])}
        executing = executing_shards(context.run.step_keys_to_execute, partition, shard["shards"])
        owned = owned_flights(shard["shard"], shard.get("shard_flights") or _own_only(shard), executing, list(planned))
        done = assembled_from(commits, list(planned.values()))
        if done is not None:  # a re-execution of all steps, after this lineage wrote the partition from this plan
            context.log.info(f"{partition} shard {shard['shard']}: already assembled from this plan by run "
                             f"{done['run_id']} of this run's lineage: nothing to do")
        problems = {} if done is not None else commits.problems({f: planned[f].fingerprint for f in owned})
        report = {"partition": partition, "shard": shard["shard"], "shards": shard["shards"], "flights": owned,
                  "units": shard["units"],
                  "audio_s": round(sum(planned[f].audio_s for f in owned), 3),
                  "taken_over": [f for f in owned if f not in shard["flights"]],
                  "resumed_flights": [f for f in owned if f not in problems]}
        log_resume(context, shard, report, problems, root, executing)
        return report | process_flights(context, config, storage, gpu, lease, commits, shard["units"], planned,
                                        [f for f in owned if f in problems], stops)


def process_flights(context, config: ShardConfig, storage: StorageResource, gpu: GpuResource, lease, commits: FlightCommits,
                    units: list[str] | None, planned: dict[str, PlannedFlight], pending: list[str],
                    stops: StopRequests) -> dict:
    """Run `pending` flights through the locked section, committing each; the report's processing part. A stop
    signal (`stops`) stops it before the model load, after it and before each flight.

    A decoder in the wrong mode quarantines this worker: the step fails, not retried, and frees the lease. A
    device fault quarantines it too, but the step is retried (in a fresh process) and keeps the lease and the
    flights committed so far.
    """
    stops.checkpoint()  # before the imports below (NeMo: seconds)
    # Imported here, not at module top: pyannote and NeMo must stay out of code-location load.
    from batch_assets.gpu.asr import DecoderModeError
    from batch_assets.gpu.faults import DeviceFault
    from batch_assets.gpu.precision import describe as describe_precision
    from batch_assets.gpu.runner import FlightWork, Levers, run_section

    switches = {s.name: getattr(config, s.name) for s in SWITCHES}
    if not pending:
        return {"run_id": context.run.run_id, "switches": switches, "processed_flights": [], "section": None,
                "model_load_seconds": None, "step_peak_rss_mib": None}
    ok = storage.read_parquet("prepared_flights", commits.partition, "plan").filter(pl.col("result_class") == "ok")
    if units is not None:
        ok = ok.filter(pl.col("unit_id").is_in(units))
    hints = unit_speaker_hints(storage.read_parquet("fetched_audio", commits.partition, "manifest"), run_hints(config))
    units_by_flight: dict[str, list[dict]] = collections.defaultdict(list)
    for row in ok.iter_rows(named=True):
        unit_hints_ = hints.get(row["unit_id"], SpeakerHints())
        units_by_flight[row["flight_id"]].append(
            row | {"speaker_hints": unit_hints_ if row.get("window") is None else window_hints(unit_hints_)})
    models = gpu.load(context.log)
    stops.checkpoint()
    levers = Levers(**switches, decode_budget_seconds=config.decode_budget_seconds,
                    prepare_workers=config.prepare_workers, asr_batch_size=gpu.asr_batch_size)
    try:
        section = run_section(
            models, [FlightWork(f, planned[f].audio_s, units_by_flight.get(f, [])) for f in pending], levers,
            load=lambda flight_id: storage.read_flight(planned[flight_id].audio_uri, planned[flight_id].num_units),
            commit=lambda flight_id, outcomes: commits.commit(flight_id, outcomes, planned[flight_id].fingerprint),
            section=gpu.section(), checkpoint=stops.checkpoint,
        )
    except DeviceFault as error:
        quarantine(str(error))
        context.log.error(f"QUARANTINED: {error}")
        # Retried (the op's retry policy), in a fresh process or pod: this one refuses GPU work from now on. The
        # flights committed so far are kept and the lease stays with this run for the retry.
        unfinished = commits.problems({f: planned[f].fingerprint for f in pending})
        raise dg.Failure(description=f"worker quarantined after a device fault: {error}. The step is retried in a fresh "
                         f"process; {len(pending) - len(unfinished)} of the {len(pending)} flight(s) it ran are committed "
                         "and kept", metadata={"quarantine": str(error)}, allow_retries=True) from error
    except DecoderModeError as error:
        quarantine(str(error))
        lease.release()  # not retried: this run will not write the partition
        context.log.error(f"QUARANTINED: {error}")
        # Not retried here: this process is quarantined. A rerun lands on a fresh worker (a new pod).
        raise dg.Failure(description=f"worker quarantined: {error}", metadata={"quarantine": str(error)},
                         allow_retries=False) from error
    stats = section.stats
    return {
        "run_id": context.run.run_id,  # the run whose step did the work (a re-execution loads its parent's reports)
        "switches": switches,
        "processed_flights": pending,
        "step_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "model_load_seconds": round(models.load_seconds, 2),
        "device": str(models.device),
        "section": {
            "section_seconds": round(section.section_s, 3), "lock_wait_seconds": round(section.lock_wait_s, 3),
            "entered_unix": section.entered_unix, "exited_unix": section.exited_unix,
            "audio_seconds": round(section.audio_s, 3), "units": section.units,
            "vad_seconds": round(stats.seconds["vad"], 3), "diarization_seconds": round(stats.seconds["diarization"], 3),
            "asr_seconds": round(stats.seconds["asr"], 3), "asr_batch_retries": stats.asr_batch_retries,
            "flight_load_wait_seconds": round(section.load_wait_s, 3), "max_prepared_ahead_seconds": round(section.max_ahead_s, 1),
            "segmentation_forwards": section.segmentation_forwards,
            "segmentation_forwards_by_stage": dict(stats.segmentation_forwards),
            "segmentation_reuse": dict(stats.segmentation_reuse), "decoder_modes": sorted(stats.decoder_modes),
            "embedding_work": dict(stats.embedding_work), "embedding_paths": dict(stats.embedding_paths),
            "cuda_peak_bytes": section.cuda_peak_bytes, "decoder_checks_skipped": stats.decoder_checks_skipped,
            "stage_seconds": stats.stage_seconds(), "host_seconds_in_section": round(stats.host_in_section_s, 3),
            "host_overlapped_seconds": round(stats.overlapped_host_s, 3),
            "host_after_section_seconds": round(section.host_after_section_s, 3),
            "host_phase_device_seconds": round(stats.host_phase_device_s, 3), "batch_fallbacks": stats.batch_fallbacks,
            "precision": describe_precision(models.device, levers.half_precision_enabled),
        },
    }


def assembled_from(commits: FlightCommits, planned: list[PlannedFlight]) -> dict | None:
    """The record of this root run's assembly of the partition, if it was assembled from exactly this plan."""
    done = commits.assembled()
    return done if done is not None and done["plan"] == plan_fingerprint(planned) else None


def _own_only(shard: dict) -> list[list[str]]:
    """A shard spec from before `shard_flights` existed (a run resumed across a deploy): only its own flights known."""
    return [shard["flights"] if i == shard["shard"] else [] for i in range(shard["shards"])]


def log_resume(context, shard: dict, report: dict, problems: dict[str, str], root: str, executing: list[int]) -> None:
    """Say what a resumed or re-executed shard does, and why a flight is redone (the resumed run's log)."""
    partition, index = shard["partition"], shard["shard"]
    if report["taken_over"]:
        idle = [i for i in range(shard["shards"]) if i not in executing]
        pending = [f for f in report["taken_over"] if f in problems]
        context.log.warning(f"{partition} shard {index}: this run does not execute shard(s) {idle} of {shard['shards']}: "
                            f"taking over {len(report['taken_over'])} of their flights, {len(pending)} without a valid "
                            f"commit: {pending}")
    if report["resumed_flights"] or context.run.parent_run_id:
        context.log.warning(f"{partition} shard {index}: resuming run {root}: {len(report['resumed_flights'])} flight(s) "
                            f"already committed, {len(problems)} to process")
    for flight_id, why in problems.items():
        if why != "not committed":
            context.log.warning(f"{partition} shard {index}: redoing {flight_id}: {why}")


@dg.op(
    ins={"reports": dg.In(list)},
    out={asset: dg.Out(dg.Nothing, is_required=False) for asset in GPU_ASSET_KEYS},
    pool=GPU_POOL,
    tags={"dagster-k8s/config": GPU_K8S_CONFIG},
    retry_policy=dg.RetryPolicy(max_retries=1, delay=30),
    description="Finish any planned flight without a valid commit (GPU work a re-execution skipped), then assemble each "
    "partition's three tables from the commits and replace them atomically",
)
def assemble_gpu_tables(context: dg.AssetExecutionContext, config: AssembleConfig, storage: StorageResource,
                        gpu: GpuResource, reports: list):
    partitions = list(context.partition_keys)
    with stop_requests() as stops:  # as in gpu_shard: it may process flights too
        record_process_identity(context)
        for partition in partitions:
            _assemble_one(context, config, storage, gpu, reports, partition, len(partitions), stops)
    try:  # housekeeping: never fails a step whose partitions are written
        removed = discard_run_values(storage, context.instance)
        context.log.info(f"removed the step values of {len(removed)} finished run(s) from {VALUES_FOLDER}/")
    except Exception as error:  # noqa: BLE001
        context.log.warning(f"could not remove old step values from {VALUES_FOLDER}/ ({type(error).__name__}: {error})")
    for asset in GPU_ASSET_KEYS:
        yield dg.Output(None, asset)


def _assemble_one(context: dg.AssetExecutionContext, config: AssembleConfig, storage: StorageResource, gpu: GpuResource,
                  reports: list, partition: str, partitions_in_run: int, stops: StopRequests) -> None:
    mine = sorted((r for r in reports if r["partition"] == partition), key=lambda r: r["shard"])
    lease = partition_lease(context, storage, partition)
    # kept on error: a retried device fault resumes under it; a failed run frees it (its holder run finished)
    with lease_lost_fails(), lease.held(log=context.log.warning, release_on_error=False):
        try:
            metadata = assemble_partition(context, config, storage, gpu, lease, partition, mine, partitions_in_run, stops)
        except (PermissionError, FileExistsError, NotADirectoryError, IsADirectoryError) as error:
            # the output storage refuses the write (a policy, a path taken by a file): waiting cannot fix it
            raise dg.Failure(f"{partition}: the output storage refused a write ({error}): fix BATCH_ASSETS_STORAGE_URL "
                             "or its permissions, then re-execute from failure (committed GPU work is kept)",
                             allow_retries=False) from error
        for asset, values in metadata.items():
            context.add_asset_metadata(values, asset_key=asset, partition_key=partition)


@dg.graph_multi_asset(
    name="gpu_section",
    outs={
        "vad_scores": dg.AssetOut(kinds={"pytorch", "parquet"}, dagster_type=dg.Nothing,
                                  description="Raw pyannote segmentation scores per unit and the speech regions derived from them."),
        "diarization": dg.AssetOut(kinds={"pytorch", "parquet"}, dagster_type=dg.Nothing,
                                   description="Speaker turns (with and without overlap) and one embedding per speaker, per unit."),
        "transcripts": dg.AssetOut(kinds={"pytorch", "parquet"}, dagster_type=dg.Nothing,
                                   description="Every unit with its final result class and text; every word with times and speaker."),
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
    vad_scores, diarization, transcripts = assemble_gpu_tables(reports)
    return {"vad_scores": vad_scores, "diarization": diarization, "transcripts": transcripts}


def assemble_partition(context: dg.AssetExecutionContext, config: AssembleConfig, storage: StorageResource,
                       gpu: GpuResource, lease, partition: str, reports: list[dict], partitions_in_run: int,
                       stops: StopRequests) -> dict[str, dict]:
    """Build and write one partition's tables from its commits; returns each asset's metadata.

    First, any flight of the current plan without a valid commit is processed here (`gpu/resume.py`: Dagster's
    re-execution may rerun no shard step at all); then, should one still lack a commit, nothing is written. A
    partition this root run already wrote from the same plan (a re-execution of a run that failed later) is not
    written again: its metadata is read from the tables in place.
    """
    manifest = storage.read_parquet("fetched_audio", partition, "manifest")
    plan = storage.read_parquet("prepared_flights", partition, "plan")
    chosen = selected_units(config.units, manifest)
    planned = read_planned_flights(storage, partition, manifest, chosen)
    commits = FlightCommits(storage, partition, root_run_id(context), fence=lease.check)
    units = sorted(chosen) if chosen is not None else None
    if (done := assembled_from(commits, planned)) is not None:
        context.log.info(f"{partition}: already assembled from this plan by run {done['run_id']} of "
                         "this run's lineage: kept as written")
        tables = {key: storage.read_parquet(key[0], partition, key[1]) for key in TABLE_SCHEMAS}
        uris = {key: storage.output_url(key[0], partition, f"{key[1]}.parquet") for key in TABLE_SCHEMAS}
        return partition_metadata(tables, uris, reports, gpu, chosen, partitions_in_run, context.run.run_id)
    fingerprints = {f.flight_id: f.fingerprint for f in planned}
    problems = commits.problems(fingerprints)
    if problems:
        context.log.warning(f"{partition}: {len(problems)} planned flight(s) without a valid commit after the shard steps "
                            f"of this run (their shard steps did not run, or the plan changed): processing them here: "
                            + "; ".join(f"{flight_id}: {why}" for flight_id, why in problems.items()))
        by_id = {f.flight_id: f for f in planned}
        reports = [*reports, {"partition": partition, "shard": "finish", "flights": list(problems), "units": units,
                              "audio_s": round(sum(by_id[f].audio_s for f in problems), 3),
                              "taken_over": list(problems), "resumed_flights": []}
                   | process_flights(context, config, storage, gpu, lease, commits, units, by_id, list(problems), stops)]
        problems = commits.problems({f: fingerprints[f] for f in problems})  # only those just processed
    if problems:
        shown = "; ".join(f"{flight_id}: {why}" for flight_id, why in list(problems.items())[:5])
        raise dg.Failure(
            f"{partition}: {len(problems)} of {len(planned)} planned flights have no valid commit ({shown}); nothing was "
            "written. Their GPU work did not run in this run: re-execute the run with all steps, or rerun the partition.",
            metadata={"flights_without_commit": sorted(problems)}, allow_retries=False)
    previous = tables_to_keep(storage, partition, manifest) if chosen is not None else None
    flight_ids = [f.flight_id for f in planned]
    fragments = commits.fragments(flight_ids)  # every one validated above
    pieces = window_pieces(plan)
    window_scores = [uri for uid, uri in zip(fragments["vad_units"]["unit_id"], fragments["vad_units"]["scores_uri"],
                                             strict=True) if uid in pieces]
    fragments = stitch(  # a windowed unit's windows become the unit (`windows.py`)
        fragments, plan,
        write_scores=lambda uid, npy: _write_fenced(storage, storage.output_url(
            "vad_scores", partition, f"{commits.scores_name(uid)}.npy"), npy, lease.check),
        read_array=storage.read_array, hints=unit_speaker_hints(manifest, run_hints(config)),
        threshold=config.speaker_link_threshold)
    whole = chosen is None
    unit_order = manifest["unit_id"].to_list()
    units, segments, words = transcript_tables(manifest if whole else manifest.filter(pl.col("unit_id").is_in(list(chosen))),
                                               plan, fragments["outcomes"], fragments["words"], run_hints(config))
    processed = plan.filter(pl.col("result_class") == "ok")["unit_id"].unique().to_list()  # the units the section classed
    guard_degradation(context, config, storage, partition, units.filter(pl.col("unit_id").is_in(processed)), "gpu_section")
    tables = {("vad_scores", "units"): fragments["vad_units"], ("vad_scores", "regions"): fragments["regions"],
              ("diarization", "turns"): fragments["turns"], ("diarization", "speakers"): fragments["speakers"],
              ("transcripts", "units"): units, ("transcripts", "segments"): segments, ("transcripts", "words"): words}
    if not whole:
        tables = {key: keep_other_units(previous[key], frame, chosen, unit_order) for key, frame in tables.items()}
    uris = {}
    for asset in GPU_ASSET_KEYS:
        with storage.replace_partition(asset, partition, remove_stale=whole, fence=lease.check) as out:
            if asset == "vad_scores":  # written by the shards (or the stitching), referenced by these tables
                out.keep([storage.filesystem(uri)[1] for uri in tables["vad_scores", "units"]["scores_uri"] if uri])
            uris |= {(a, name): out.write_parquet(frame, name) for (a, name), frame in tables.items() if a == asset}
    commits.mark_assembled(plan_fingerprint(planned), context.run.run_id)
    commits.discard()
    remove_files(storage, window_scores, lease.check)  # the windows' own score arrays: stitched into their units'
    return partition_metadata(tables, uris, reports, gpu, chosen, partitions_in_run, context.run.run_id)


def remove_files(storage: StorageResource, urls: list[str], fence) -> None:
    """Remove files of the partition's outputs that nothing references any more (gone already: fine)."""
    for url in urls:
        fence()
        fs, path = storage.filesystem(url)
        with contextlib.suppress(FileNotFoundError):
            remove_path(fs, path)


def _write_fenced(storage: StorageResource, url: str, chunks, fence) -> str:
    """Write a file of the partition's outputs while this run holds its lease; returns its URL."""
    fence()
    storage.write_chunks(url, chunks)
    return url


def _sum(reports: list[dict], key: str) -> float:
    return sum(r["section"][key] for r in reports if r["section"])


def partition_metadata(tables: dict, uris: dict, reports: list[dict], gpu: GpuResource, chosen: set | None,
                       partitions_in_run: int, run_id: str) -> dict[str, dict]:
    vad_units, turns, units = tables["vad_scores", "units"], tables["diarization", "turns"], tables["transcripts", "units"]
    speakers, words = tables["diarization", "speakers"], tables["transcripts", "words"]
    ran = [r for r in reports if r["section"]]
    audio_s = float(vad_units["duration_s"].sum() or 0.0)
    section_s = _sum(reports, "section_seconds")
    counters: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in ran:
        for key in ("segmentation_forwards_by_stage", "segmentation_reuse", "embedding_work", "embedding_paths"):
            counters[key].update(r["section"].get(key, {}))
    stages: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in ran:
        for stage, split in r["section"].get("stage_seconds", {}).items():
            stages[stage].update(split)
    host_in_section = _sum([r for r in ran if "host_seconds_in_section" in r["section"]], "host_seconds_in_section")
    entered = [r["section"]["entered_unix"] for r in ran]
    exited = [r["section"]["exited_unix"] for r in ran]
    loads = [r["model_load_seconds"] for r in ran]
    section = {  # the GPU work's report, once (on transcripts, the asset analysts open)
        "shards": max((r.get("shards", 1) for r in reports if r["shard"] != "finish"), default=1),  # as planned
        # flights no shard step of the run processed (a re-execution that reran none of their shards)
        "flights_finished_in_assembly": sum(len(r["processed_flights"]) for r in reports if r["shard"] == "finish"),
        "shard_report": dg.MetadataValue.md(shard_markdown(reports)),
        # flights whose commits this run reused: every flight of the work but those this run's own steps processed
        "resumed_flights": len({f for r in reports for f in r["flights"]})
        - sum(len(r["processed_flights"]) for r in reports if r.get("run_id") == run_id),
        "section_seconds": round(section_s, 3),
        "lock_wait_seconds": round(_sum(reports, "lock_wait_seconds"), 3),
        "section_entered": dg.MetadataValue.timestamp(min(entered)) if entered else "not entered (nothing to process)",
        "section_exited": dg.MetadataValue.timestamp(max(exited)) if exited else "not entered (nothing to process)",
        "vad_seconds": round(_sum(reports, "vad_seconds"), 3),
        "diarization_seconds": round(_sum(reports, "diarization_seconds"), 3),
        "asr_seconds": round(_sum(reports, "asr_seconds"), 3),
        "asr_batch_retries": int(_sum(reports, "asr_batch_retries")),
        # each stage's seconds in model forwards (device) and the rest (host); "tables" is the commits'
        "stage_seconds": {stage: {k: round(v, 3) for k, v in split.items()} for stage, split in stages.items()},
        # host work on the device work's path (lever 6 moves clustering, attribution and tables off it)
        "host_seconds_in_section": round(host_in_section, 3),
        "host_share_of_section": round(host_in_section / section_s, 4) if section_s else None,
        "host_after_section_seconds": round(sum(r["section"].get("host_after_section_seconds", 0.0) for r in ran), 3),
        "batch_fallbacks": int(sum(r["section"].get("batch_fallbacks", 0) for r in ran)),
        "precision": sorted({r["section"].get("precision", "float32") for r in ran}),
        "flight_load_wait_seconds": round(_sum(reports, "flight_load_wait_seconds"), 3),
        "max_prepared_ahead_seconds": max((r["section"]["max_prepared_ahead_seconds"] for r in ran), default=0.0),
        "segmentation_forwards": int(_sum(reports, "segmentation_forwards")),
        "segmentation_forwards_by_stage": {k: counters["segmentation_forwards_by_stage"][k]
                                           for k in ("vad", "vad_of_diarized_units", "diarization")},
        "segmentation_reuse": dict(counters["segmentation_reuse"]),
        # diarization's embedding step: trunk forwards (stock: one per chunk and local speaker) and pooled pairs
        "embedding_work": {k: counters["embedding_work"][k]
                           for k in ("chunks", "pairs", "active_pairs", "trunk_forwards", "pooled_pairs")},
        "embedding_paths": dict(counters["embedding_paths"]),
        "decoder_modes": sorted({m for r in ran for m in r["section"]["decoder_modes"]}),
        # flights with nothing to transcribe: no ASR call, so no decoder check (graphs are captured lazily)
        "decoder_checks_skipped": sum(r["section"].get("decoder_checks_skipped", 0) for r in ran),
        "switches": reports[0]["switches"] if reports else {},
        "device": ran[0]["device"] if ran else "not used",
        "models": {"asr": gpu.asr_model, "diarization": gpu.diarization_pipeline},
        "model_load_seconds": max(loads) if loads else "not loaded (nothing to process)",
        "partitions_in_run": partitions_in_run,
        "rerun_units": sorted(chosen) if chosen is not None else "all",
        "audio_hours": round(audio_s / 3600, 4),
        "audio_seconds_per_section_second": round(_sum(reports, "audio_seconds") / section_s, 2) if section_s else None,
    }
    rss = [r["step_peak_rss_mib"] for r in ran if r.get("step_peak_rss_mib")]
    if rss:
        section["gpu_step_peak_rss_mib"] = max(rss)
    peaks = [r["section"]["cuda_peak_bytes"] for r in ran if r["section"]["cuda_peak_bytes"]]
    if peaks:
        section["cuda_peak_memory_gib"] = round(max(peaks) / 2**30, 3)
    return {
        "vad_scores": {
            "units": len(vad_units),
            "speech_ratio": round(float(vad_units["speech_s"].sum() or 0.0) / audio_s, 4) if audio_s else None,
            "vad_seconds": section["vad_seconds"],
            "segmentation_forwards": counters["segmentation_forwards_by_stage"]["vad"],
        } | tables_metadata(tables, uris, "vad_scores", "units", "regions"),
        "diarization": {
            "turns": len(turns),
            "speakers": len(speakers),
            "speakers_per_unit": {r["unit_id"]: r["len"] for r in speakers.group_by("unit_id", maintain_order=True).len().iter_rows(named=True)},
            "diarization_seconds": section["diarization_seconds"],
            "segmentation_reuse": section["segmentation_reuse"],
            "segmentation_forwards": counters["segmentation_forwards_by_stage"]["diarization"],
        } | tables_metadata(tables, uris, "diarization", "turns", "speakers"),
        "transcripts": section | {
            "units": len(units),
            "units_by_class": class_counts(units),
            "unit_classes": dg.MetadataValue.md(unit_classes_markdown(units)),
            "words": len(words),
            "segments": len(tables["transcripts", "segments"]),
            "transcript": dg.MetadataValue.md(transcript_text.markdown(units, words) or "(no units)"),
        } | tables_metadata(tables, uris, "transcripts", "units", "words") | tables_metadata(tables, uris, "transcripts", "units", "segments"),
    }


def tables_metadata(tables: dict, uris: dict, asset: str, main: str, other: str) -> dict:
    """An asset's two tables for the UI: paths, the main table's schema and row count, the other's schema."""
    return {
        f"{main}_table": dg.MetadataValue.path(uris[asset, main]),
        f"{other}_table": dg.MetadataValue.path(uris[asset, other]),
        f"{other}_schema": table_schema(TABLE_SCHEMAS[asset, other]),
        "dagster/column_schema": table_schema(TABLE_SCHEMAS[asset, main]),
        "dagster/row_count": len(tables[asset, main]),
    }


def shard_markdown(reports: list[dict]) -> str:
    lines = ["| shard | flights | resumed | taken over | audio s | section s | model load s | step peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in reports:
        sec = r["section"] or {}
        load = r["model_load_seconds"] if r["model_load_seconds"] is not None else "-"
        lines.append(f"| {r['shard']} | {len(r['flights'])} | {len(r['resumed_flights'])} | {len(r.get('taken_over', []))} | "
                     f"{r['audio_s']:.1f} | "
                     f"{sec.get('section_seconds', 0.0):.1f} | {load} | {r.get('step_peak_rss_mib', '-')} |")
    return "\n".join(lines)
