"""What a GPU step does with its share of a partition: the flights it owns, those it resumes, the locked section.

`run_shard` is the body of the `gpu_shard` and `gpu_leftover` ops (`gpu/assets.py`): it takes the partition's
lease, works out the flights it owns (a shard step: its shard's; a leftover step: those left in its shard and
those of leftover steps a re-execution does not rerun: `gpu/steps/resume.py`), skips flights with a valid commit
(made for this plan under this deployment: `gpu/outputs/commit_identity.py`), runs the rest through the typed runner
(`gpu/section/runner.py`) inside the device lock, committing each (`gpu/outputs/commits.py`) and logging a progress
line per commit (`gpu/steps/progress.py`), and returns a `ShardReport`.
"""

import collections
import contextlib
import dataclasses
import resource
from collections.abc import Iterable

import dagster as dg
import polars as pl

from batch_assets.gpu.outputs.commits import NOT_COMMITTED, FlightCommits
from batch_assets.gpu.steps.progress import StepProgress
from batch_assets.gpu.steps.resources import GpuResource, quarantine
from batch_assets.gpu.steps.resume import (
    PlannedFlight,
    executing_shards,
    owned_flights,
    plan_fingerprint,
    planned_flights,
)
from batch_assets.gpu.steps.run_config import (
    ShardConfig,
    checked_run_language,
    run_hints,
    unit_channel_choices,
    unit_inputs,
    unit_languages,
    unit_speaker_hints,
)
from batch_assets.gpu.steps.shard_values import ShardReport, ShardSpec
from batch_assets.gpu.steps.stop_requests import StopRequests
from batch_assets.ingest.manifest import read_manifest
from batch_assets.ingest.measured_lengths import CurrentPlan, MeasuredLength, current_plan, record_measured
from batch_assets.ingest.speaker_hints import UNHINTED
from batch_assets.ingest.unit_channels import MIXED_DOWN
from batch_assets.ingest.unit_language import DETECT
from batch_assets.long_units.windows import window_hints
from batch_assets.orchestration.dead_runs import record_process_identity
from batch_assets.orchestration.steps import lease_refusals_fail, partition_lease
from batch_assets.settings import current_settings
from batch_assets.source.fetch import retries_of_run
from batch_assets.source.flight_audio import flight_source
from batch_assets.storage.resource import StorageResource
from batch_assets.switches import SWITCHES


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
        raise dg.Failure(f"units not in this partition's manifest: {unknown} (new audio? list it in the same run, "
                         "ops.fetched_audio.config.units, as the late-audio sensor's runs do; or rerun the whole "
                         "partition)",
                         allow_retries=False)
    return {u if u in ids else by_key[u] for u in requested}


def read_planned_flights(storage: StorageResource, partition: str, manifest: pl.DataFrame | None = None,
                         units: Iterable[str] | None = None, config=None,
                         routing: dict[str, str] | None = None,
                         current: CurrentPlan | None = None) -> list[PlannedFlight]:
    """The partition's current planned flights (`gpu/steps/resume.py`), read from `prepared_flights` and the lengths
    GPU steps measured (`ingest/measured_lengths.py: current_plan`) and the manifest; with the step's `config` (its
    hints and language) and the `routing`, fingerprinted with what the run config gives each unit, as every step
    that judges commits does. `current`: the plan already read for `manifest` (else read here)."""
    if manifest is None:
        manifest = read_manifest(storage, partition)
    inputs = unit_inputs(manifest, config, routing or {}) if config is not None else None
    current = current or current_plan(storage, partition, manifest)
    return planned_flights(current.manifest, current.plan, current.flights, units, inputs)


def run_shard(context: dg.OpExecutionContext, config: ShardConfig, storage: StorageResource, gpu: GpuResource,
              shard: ShardSpec, stops: StopRequests, leftover: bool = False) -> ShardReport:
    """A `gpu_shard` step (with `leftover`, a `gpu_leftover` step): process the flights it owns that have no valid
    commit, under the partition's lease. A shard step owns its shard's planned flights; a leftover step the
    flights left in its shard and those of leftover steps this run does not execute (`gpu/steps/resume.py`)."""
    record_process_identity(context)  # the dead-run check tells this process from a later one with its pid
    partition, root = shard.partition, root_run_id(context)
    lease = partition_lease(context, storage, partition)
    commits = FlightCommits(storage, partition, root, gpu.commit_identity(run_switches(config), gpu_step=True),
                            fence=lease.check)
    with lease_refusals_fail(), lease.held(config.lease_wait_seconds, context.log.warning, release=False,
                                        release_on_error=False):  # siblings work
        planned = {f.flight_id: f for f in read_planned_flights(storage, partition, units=shard.units,
                                                                   config=config, routing=gpu.routing())}
        idle: list[int] = []
        if leftover:
            left = [f for f in planned if any(f in flights for flights in shard.shard_flights)]
            executing = executing_shards(context.run.step_keys_to_execute, partition, shard.shards)
            idle = [i for i, flights in enumerate(shard.shard_flights) if flights and i not in executing]
            owned = owned_flights(shard.shard, shard.shard_flights, executing, left)
        else:
            owned = [f for f in planned if f in shard.flights]  # a flight the plan lost since is not processed
        done = assembled_from(commits, list(planned.values()))
        if done is not None:  # a re-execution of all steps, after this lineage wrote the partition from this plan
            context.log.info(f"{partition} {step_name(shard.shard, leftover)}: already assembled from this plan by run "
                             f"{done['run_id']} of this run's lineage: nothing to do")
        problems = {} if done is not None else commits.problems({f: planned[f].fingerprint for f in owned})
        report = ShardReport(partition, shard.shard, shard.shards, owned, shard.units,
                             audio_s=round(sum(planned[f].audio_s for f in owned), 3),
                             taken_over=[f for f in owned if f not in shard.flights],
                             resumed_flights=[f for f in owned if f not in problems], leftover=leftover,
                             redone={f: why for f, why in problems.items() if why != NOT_COMMITTED},
                             reused_from={f: root for f, root in commits.reused.items() if f in owned})
        log_resume(context, report, problems, root, idle)
        return process_flights(context, config, storage, gpu, lease, commits, report, planned,
                               [f for f in owned if f in problems], stops)


def run_switches(config) -> dict[str, bool]:
    """Every switch the step's config holds, as it runs it (a listing or assembly step: the result-changing ones)."""
    return {s.name: getattr(config, s.name) for s in SWITCHES if hasattr(config, s.name)}


def step_name(shard: int, leftover: bool) -> str:
    return f"leftover step of shard {shard}" if leftover else f"shard {shard}"


def process_flights(context, config: ShardConfig, storage: StorageResource, gpu: GpuResource, lease,
                    commits: FlightCommits, report: ShardReport, planned: dict[str, PlannedFlight], pending: list[str],
                    stops: StopRequests) -> ShardReport:
    """Run `pending` flights through the locked section, committing each; `report` with what was processed. A
    stop signal (`stops`) stops it before the model load, after it and before each flight.

    A decoder in the wrong mode quarantines this worker: the step fails, not retried, and frees the lease. A
    device fault quarantines it too, but the step is retried (in a fresh process) and keeps the lease and the
    flights committed so far.
    """
    stops.checkpoint()  # before the imports below (NeMo: seconds)
    # Imported here, not at module top: pyannote and NeMo must stay out of code-location load.
    from batch_assets.gpu.adapters.nemo_adapter import absent_fixes
    from batch_assets.gpu.asr.transcribe import DecoderModeError
    from batch_assets.gpu.device.faults import DeviceFault
    from batch_assets.gpu.section.flight import SectionUnit
    from batch_assets.gpu.section.levers import Levers
    from batch_assets.gpu.section.runner import FlightWork, run_section

    switches = run_switches(config)
    report = dataclasses.replace(report, run_id=context.run.run_id, switches=switches)
    if not pending:
        return report
    current = current_plan(storage, commits.partition, read_manifest(storage, commits.partition))
    plan, manifest = current.plan.filter(pl.col("result_class") == "ok"), current.manifest
    ok = plan.filter(pl.col("flight_id").is_in(pending))
    if report.units is not None:
        ok = ok.filter(pl.col("unit_id").is_in(report.units))
    hints = unit_speaker_hints(manifest, run_hints(config))
    languages = unit_languages(manifest, checked_run_language(config, gpu.routing()))
    channels = unit_channel_choices(manifest, config)
    units_by_flight: dict[str, list[SectionUnit]] = collections.defaultdict(list)
    for row in ok.iter_rows(named=True):
        unit_hints_ = hints.get(row["unit_id"], UNHINTED).hints
        units_by_flight[row["flight_id"]].append(SectionUnit(
            row["unit_id"], row["offset_samples"], row["num_samples"], row.get("window"),
            unit_hints_ if row.get("window") is None else window_hints(unit_hints_),
            languages.get(row["unit_id"], DETECT), channels.get(row["unit_id"], MIXED_DOWN)))
    levers = Levers(**switches, decode_budget_seconds=config.decode_budget_seconds,
                    prepare_workers=config.prepare_workers, fetch_workers=config.fetch_workers,
                    asr_batch_size=gpu.asr_batch_size)
    # the whole plan: a resumed windowed unit's layout and window count include its windows already committed
    def measured(unit_id: str, identity: str, samples: int) -> None:  # a unit longer than its plan's room
        found = MeasuredLength(unit_id, identity, samples)
        record_measured(storage, commits.partition, found)
        context.log.warning(f"{commits.partition}: {unit_id} decoded to {found.seconds:.1f} s, longer than "
                            f"planned: planned again in windows of {current.spec.seconds:.0f} s from that length; this "
                            "run's leftover step processes them (ingest/measured_lengths.py)")

    source = flight_source(plan, manifest, storage.filesystem, levers.unit_fetch_workers,
                           storage.simulated_latency_per_unit_s, current_settings().tmp_dir, load=ok,
                           retries=retries_of_run(context.run.run_config), spec=current.spec, measured=measured,
                           modes={uid: (choice.mode, choice.source) for uid, choice in channels.items()})
    if levers.prepare_flight_enabled:
        source.start(pending[:1])  # lever 1: the first flight fetched and decoded while the models load
    with contextlib.closing(source):  # a flight started early and a windowed unit's stream the section left
        models = gpu.load(context.log)
        stops.checkpoint()
        progress = StepProgress(f"{report.partition} {step_name(report.shard, report.leftover)}",
                                len(report.flights), report.audio_s)
        progress.resumed(len(report.flights) - len(pending),
                         sum(planned[f].audio_s for f in report.resumed_flights))

        def commit(flight_id: str, outcomes: list) -> None:
            commits.commit(flight_id, outcomes, planned[flight_id].fingerprint, absent_fixes())
            context.log.info(progress.flight_done(flight_id, len(outcomes), planned[flight_id].audio_s))

        try:
            section = run_section(
                models, [FlightWork(f, planned[f].load_s, units_by_flight.get(f, [])) for f in pending], levers,
                load=source.load, commit=commit, section=gpu.section(), checkpoint=stops.checkpoint,
            )
        except DeviceFault as error:
            quarantine(str(error))
            context.log.error(f"QUARANTINED: {error}")
            # Retried (the op's retry policy), in a fresh process or pod: this one refuses GPU work from now on.
            # The flights committed so far are kept and the lease stays with this run for the retry.
            unfinished = commits.problems({f: planned[f].fingerprint for f in pending})
            raise dg.Failure(description=f"worker quarantined after a device fault: {error}. The step is retried "
                             f"in a fresh process; {len(pending) - len(unfinished)} of the {len(pending)} flight(s) "
                             "it ran are committed and kept", metadata={"quarantine": str(error)},
                             allow_retries=True) from error
        except DecoderModeError as error:
            quarantine(str(error))
            lease.release()  # not retried: this run will not write the partition
            context.log.error(f"QUARANTINED: {error}")
            # Not retried here: this process is quarantined. A rerun lands on a fresh worker (a new pod).
            raise dg.Failure(description=f"worker quarantined: {error}", metadata={"quarantine": str(error)},
                             allow_retries=False) from error
    return dataclasses.replace(
        report, processed_flights=pending, section=section.to_metadata(),
        step_peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        model_load_seconds=round(models.load_seconds + sum(models.asr_load_seconds.values()), 2),
        device=str(models.device))


def assembled_from(commits: FlightCommits, planned: list[PlannedFlight]) -> dict | None:
    """The record of this root run's assembly of the partition, if it was assembled from exactly this plan."""
    done = commits.assembled()
    return done if done is not None and done["plan"] == plan_fingerprint(planned) else None


def log_resume(context, report: ShardReport, problems: dict[str, str], root: str, idle: list[int]) -> None:
    """Say what a resumed or re-executed step does, and why a flight is redone (the resumed run's log)."""
    partition, step = report.partition, step_name(report.shard, report.leftover)
    if report.taken_over:
        pending = [f for f in report.taken_over if f in problems]
        context.log.warning(f"{partition} {step}: this run does not execute the leftover steps of shard(s) {idle}: "
                            f"taking over {len(report.taken_over)} of their flights, {len(pending)} without a valid "
                            f"commit: {pending}")
    if report.resumed_flights or context.run.parent_run_id:
        context.log.warning(f"{partition} {step}: resuming run {root}: {len(report.resumed_flights)} flight(s) "
                            f"already committed, {len(problems)} to process")
    for other, count in collections.Counter(report.reused_from.values()).items():
        context.log.warning(f"{partition} {step}: reusing {count} flight(s) committed by run {other} (stopped, "
                            "failed or killed before it assembled the partition), same plan and identity")
    for flight_id, why in problems.items():
        if why != NOT_COMMITTED:
            context.log.warning(f"{partition} {step}: redoing {flight_id}: {why}")
