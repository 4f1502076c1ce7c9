"""The assembly of a partition's three GPU tables from its flight commits (the body of `assemble_gpu_tables`).

CPU work, no model: once every flight of the current plan has a valid commit (the shard and leftover steps
made them, all on one device type), the commits become the seven tables of `vad_scores`, `diarization` and
`transcripts`, a windowed unit's windows are stitched back into the unit (`long_units/stitching.py`), the
degrade guard runs, and the partition's tables are replaced atomically (for a `units` rerun, only those units'
rows). A flight still without a commit, or commits made on two device types, fail the step, nothing written.
"""

import collections
import contextlib

import dagster as dg
import polars as pl

from batch_assets.gpu.outputs.commits import FlightCommits
from batch_assets.gpu.outputs.tables import TABLE_SCHEMAS, keep_other_units, tables_to_keep, transcript_tables
from batch_assets.gpu.steps.metadata import partition_metadata
from batch_assets.gpu.steps.resources import GpuResource
from batch_assets.gpu.steps.resume import plan_fingerprint
from batch_assets.gpu.steps.run_config import AssembleConfig, run_hints, unit_speaker_hints
from batch_assets.gpu.steps.shard_values import ShardReport
from batch_assets.gpu.steps.shard_work import (
    assembled_from,
    read_planned_flights,
    root_run_id,
    run_switches,
    selected_units,
)
from batch_assets.ingest.manifest import read_manifest
from batch_assets.ingest.measured_lengths import current_plan
from batch_assets.long_units.stitching import stitch
from batch_assets.long_units.windows import window_pieces, windows_by_unit
from batch_assets.orchestration.steps import GPU_ASSET_KEYS, guard_degradation, lease_refusals_fail, partition_lease
from batch_assets.storage.paths import remove_path
from batch_assets.storage.resource import StorageResource


def assemble_one(context: dg.AssetExecutionContext, config: AssembleConfig, storage: StorageResource, gpu: GpuResource,
                 reports: list[ShardReport], partition: str, partitions_in_run: int) -> None:
    """Assemble `partition` under its lease (waiting for it as the GPU steps do) from its steps' `reports`, and
    record each asset's metadata."""
    mine = sorted(reports, key=lambda r: (r.leftover, r.shard))
    lease = partition_lease(context, storage, partition)
    # kept on error: a retry resumes under it; a failed run frees it (its holder run finished)
    with lease_refusals_fail(), lease.held(config.lease_wait_seconds, context.log.warning, release_on_error=False):
        try:
            metadata = assemble_partition(context, config, storage, gpu, lease, partition, mine, partitions_in_run)
        except (PermissionError, FileExistsError, NotADirectoryError, IsADirectoryError) as error:
            # the output storage refuses the write (a policy, a path taken by a file): waiting cannot fix it
            raise dg.Failure(f"{partition}: the output storage refused a write ({error}): fix BATCH_ASSETS_STORAGE_URL "
                             "or its permissions, then re-execute from failure (committed GPU work is kept)",
                             allow_retries=False) from error
        for asset, values in metadata.items():
            context.add_asset_metadata(values, asset_key=asset, partition_key=partition)


def assemble_partition(context: dg.AssetExecutionContext, config: AssembleConfig, storage: StorageResource,
                       gpu: GpuResource, lease, partition: str, reports: list[ShardReport],
                       partitions_in_run: int) -> dict[str, dict]:
    """Build and write one partition's tables from its commits; returns each asset's metadata.

    Should a flight of the current plan lack a valid commit (`gpu/steps/resume.py`), nothing is written. A partition
    this root run already wrote from the same plan (a re-execution of a run that failed later) is not written
    again: its metadata is read from the tables in place.
    """
    manifest = read_manifest(storage, partition)
    current = current_plan(storage, partition, manifest)  # with the lengths the GPU steps measured
    plan = current.plan
    chosen = selected_units(config.units, manifest)
    planned = read_planned_flights(storage, partition, manifest, chosen, config, gpu.routing(), current)
    commits = FlightCommits(storage, partition, root_run_id(context), gpu.commit_identity(run_switches(config)),
                            fence=lease.check)
    if (done := assembled_from(commits, planned)) is not None:
        context.log.info(f"{partition}: already assembled from this plan by run {done['run_id']} of "
                         "this run's lineage: kept as written")
        tables = {key: storage.read_parquet(key[0], partition, key[1]) for key in TABLE_SCHEMAS}
        uris = {key: storage.output_url(key[0], partition, f"{key[1]}.parquet") for key in TABLE_SCHEMAS}
        return partition_metadata(tables, uris, reports, gpu, chosen, partitions_in_run, context.run.run_id)
    problems = commits.problems({f.flight_id: f.fingerprint for f in planned})
    if problems:
        shown = "; ".join(f"{flight_id}: {why}" for flight_id, why in list(problems.items())[:5])
        raise dg.Failure(
            f"{partition}: {len(problems)} of {len(planned)} planned flights have no valid commit ({shown}); nothing "
            "was written. Their GPU steps did not run in this run (a re-execution from failure reruns only the "
            "leftover steps that had started), or their commits were made under another deployment than this "
            "step's (a redeploy between the GPU steps and the assembly): re-execute the run with all steps (its "
            "valid commits are kept), or rerun the partition.",
            metadata={"flights_without_commit": sorted(problems)}, allow_retries=False)
    flight_ids = [f.flight_id for f in planned]
    devices = collections.Counter(str(d) for d in commits.device_types(flight_ids).values())
    if len(devices) > 1:  # this CPU step leaves the device type to the GPU steps: never publish two
        raise dg.Failure(
            f"{partition}: its flights were committed on different device types ({dict(devices)}: a re-execution on "
            "other nodes that did not rerun every GPU step); nothing was written. Re-execute the run with all steps "
            "(each GPU step redoes the flights committed on another device type than its own), or rerun the "
            "partition.", allow_retries=False)
    previous = tables_to_keep(storage, partition, manifest, chosen) if chosen is not None else None
    fragments = commits.fragments(flight_ids)  # every one validated above
    pieces = window_pieces(plan)
    window_scores = [uri for uid, uri in zip(fragments["vad_units"]["unit_id"], fragments["vad_units"]["scores_uri"],
                                             strict=True) if uid in pieces]
    hints = unit_speaker_hints(manifest, run_hints(config))
    uri_of = dict(zip(fragments["vad_units"]["unit_id"], fragments["vad_units"]["scores_uri"], strict=True))
    made_of = {uid: [[w.start_s, w.duration_s, uri_of.get(w.piece)] for w in windows]
               for uid, windows in windows_by_unit(plan).items()}
    fragments = stitch(  # a windowed unit's windows become the unit (`long_units/stitching.py`)
        fragments, plan,
        write_scores=lambda uid, npy: _write_fenced(storage, storage.output_url(
            "vad_scores", partition, f"{commits.stitched_scores_name(uid, made_of[uid])}.npy"), npy, lease.check),
        read_array=storage.read_array, hints={uid: unit.hints for uid, unit in hints.items()},
        threshold=config.speaker_link_threshold,
        estimated=set(current.manifest.filter(pl.col("duration_estimated").fill_null(False))["unit_id"]))
    whole = chosen is None
    unit_order = manifest["unit_id"].to_list()
    units, segments, words = transcript_tables(
        manifest if whole else manifest.filter(pl.col("unit_id").is_in(list(chosen))), plan, fragments["outcomes"],
        fragments["words"], hints)
    processed = plan.filter(pl.col("result_class") == "ok")["unit_id"].unique().to_list()  # the units the section
    # classed
    guard_degradation(context, config, storage, partition, units.filter(pl.col("unit_id").is_in(processed)),
                      "gpu_section")
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
