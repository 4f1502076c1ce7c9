"""`vad_scores`, `diarization` and `transcripts`: one GPU multi-asset, one resource-locked section.

The three outputs come from one step because they share the expensive state: the models on the device
and each flight's audio. The step declares `pool="gpu"` (Dagster concurrency pool, sized to the GPUs)
and asks dagster-k8s for one `nvidia.com/gpu` in its own op tags (job tags do not reach step pods).
Inside, the cross-process device lock guarantees that only one step at a time runs on the device.

A run may carry several partitions (a backfill under the BackfillPolicy): the models are loaded once for
the run and each partition gets its own locked section and its own materializations. An analyst can
rerun only some units of one partition (`units` in run config): the other units' rows are kept.
"""

import collections
import time
from collections.abc import Iterable

import dagster as dg
import polars as pl
from pydantic import Field

from batch_assets.gpu.asr import DecoderModeError, apply_decoder_mode
from batch_assets.gpu.flight_feed import FlightFeed
from batch_assets.gpu.resources import GpuResource, quarantine
from batch_assets import transcript_text
from batch_assets.gpu.tables import (
    REGIONS_SCHEMA,
    SPEAKERS_SCHEMA,
    TRANSCRIPT_UNITS_SCHEMA,
    TURNS_SCHEMA,
    VAD_UNITS_SCHEMA,
    WORDS_SCHEMA,
    diarization_tables,
    keep_other_units,
    tables_to_keep,
    transcript_tables,
    vad_tables,
)
from batch_assets.columns import table_schema
from batch_assets.ingest.assets import class_counts, fetched_audio, preflight, prepared_flights
from batch_assets.ingest.flights import DECODE_BUDGET_S
from batch_assets.partitions import backfill_policy, daily_partitions
from batch_assets.storage import StorageResource
from batch_assets.switches import SWITCH_DEFAULTS

GROUP = "gpu"
GPU_POOL = "gpu"
GPU_ASSETS = ("vad_scores", "diarization", "transcripts")
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


class GpuSectionConfig(dg.Config):
    """The speed levers, each a kill switch (defaults from BATCH_PIPELINE_*_ENABLED, read at load)."""

    prepare_flight_enabled: bool = Field(
        default=SWITCH_DEFAULTS["prepare_flight_enabled"],
        description="Prepare the next flights' audio in the background while the section works (<= decode budget ahead)",
    )
    vad_segmentation_reuse_enabled: bool = Field(
        default=SWITCH_DEFAULTS["vad_segmentation_reuse_enabled"],
        description="Diarization reuses the VAD pass's segmentation scores instead of a second forward",
    )
    asr_cuda_graphs_enabled: bool = Field(
        default=SWITCH_DEFAULTS["asr_cuda_graphs_enabled"],
        description="NeMo TDT greedy decoding with CUDA graphs (eager on CPU, recorded)",
    )
    decode_budget_seconds: float = Field(default=DECODE_BUDGET_S, description="Most audio seconds prepared ahead")
    prepare_workers: int = Field(default=1, description="Flights prepared concurrently (within the budget ahead)")
    units: list[str] = Field(
        default=[],
        description="Rerun only these units of the partition (unit_id or relative key); the other units keep their rows. "
        "Empty: the whole partition, replaced.",
    )


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


@dg.multi_asset(
    name="gpu_section",
    specs=[
        dg.AssetSpec("vad_scores", deps=[prepared_flights], group_name=GROUP, kinds={"pytorch", "parquet"},
                     description="Raw pyannote segmentation scores per unit and the speech regions derived from them."),
        dg.AssetSpec("diarization", deps=[prepared_flights], group_name=GROUP, kinds={"pytorch", "parquet"},
                     description="Speaker turns (with and without overlap) and one embedding per speaker, per unit."),
        dg.AssetSpec("transcripts", deps=[prepared_flights, fetched_audio], group_name=GROUP, kinds={"pytorch", "parquet"},
                     description="Every unit with its final result class and text; every word with times and speaker."),
    ],
    partitions_def=daily_partitions,
    backfill_policy=backfill_policy,
    # Subsettable in Dagster's eyes, so that the UI's backfill validation of a non-subsettable multi-asset
    # (which in Dagster 1.13.27 compares the three keys' partition subsets by internal representation, and
    # refuses valid backfills depending on the process's hash seed) does not apply. The three outputs are
    # still computed together: a selection of only some of them fails at once, saying so.
    can_subset=True,
    pool=GPU_POOL,
    op_tags={"dagster-k8s/config": GPU_K8S_CONFIG},
    retry_policy=dg.RetryPolicy(max_retries=1, delay=30),
)
def gpu_section(
    context: dg.AssetExecutionContext, config: GpuSectionConfig, storage: StorageResource, gpu: GpuResource
):
    selected = sorted(key.to_user_string() for key in context.selected_asset_keys)
    if selected != sorted(GPU_ASSETS):
        raise dg.Failure(f"vad_scores, diarization and transcripts are computed together: select all three (this run "
                         f"selected {selected}); to redo some units, use the `units` run config", allow_retries=False)
    partitions = context.partition_keys
    preflight(context, storage)  # before any model load: storage that refuses writes fails here, at once
    if config.units and len(partitions) > 1:
        raise dg.Failure(f"`units` reruns some units of one partition; this run has {len(partitions)} partitions",
                         allow_retries=False)
    for partition in partitions:
        for asset, metadata in run_partition(context, config, storage, gpu, partition, len(partitions)).items():
            context.add_asset_metadata(metadata, asset_key=asset, partition_key=partition)
    for asset in GPU_ASSETS:
        yield dg.MaterializeResult(asset_key=asset)


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


def run_partition(
    context: dg.AssetExecutionContext, config: GpuSectionConfig, storage: StorageResource, gpu: GpuResource,
    partition: str, partitions_in_run: int,
) -> dict[str, dict]:
    """One partition through VAD -> diarization -> ASR in one locked section; returns each asset's metadata."""
    # Imported here, not at module top: pyannote and NeMo must stay out of code-location load.
    import torch

    from batch_assets.gpu.section import SectionStats, process_flight

    manifest = storage.read_parquet("fetched_audio", partition, "manifest")
    plan = storage.read_parquet("prepared_flights", partition, "plan")
    flights = storage.read_parquet("prepared_flights", partition, "flights")
    chosen = selected_units(config.units, manifest)
    previous = None
    if chosen is not None:  # checked before the section runs: a rerun that cannot keep the other rows does nothing
        try:
            previous = tables_to_keep(storage, partition, manifest)
        except ValueError as error:
            raise dg.Failure(str(error), allow_retries=False) from error
    ok_units = plan.filter(pl.col("result_class") == "ok")
    if chosen is not None:
        ok_units = ok_units.filter(pl.col("unit_id").is_in(list(chosen)))
        flights = flights.filter(pl.col("flight_id").is_in(ok_units["flight_id"].unique().to_list()))
    audio_uris = dict(zip(flights["flight_id"], flights["audio_uri"], strict=True))
    unit_counts = dict(zip(flights["flight_id"], flights["num_units"], strict=True))
    units_by_flight: dict[str, list[dict]] = collections.defaultdict(list)
    for row in ok_units.iter_rows(named=True):
        units_by_flight[row["flight_id"]].append(row)

    stats = SectionStats()
    outcomes: list = []
    section_s = waited = 0.0
    entered_unix = exited_unix = cuda_peak = None
    forwards = load_wait_s = max_ahead_s = 0
    models = None
    if len(flights) == 0:  # an empty day (or nothing decodable): no model load, no section
        context.log.warning(f"{partition}: no units to process; the models are not loaded")
    else:
        models = gpu.load(context.log)
        forwards_before = models.segmentation_forwards[0]
        feed = FlightFeed(
            [(row["flight_id"], row["audio_s"]) for row in flights.iter_rows(named=True)],
            load=lambda flight_id: storage.read_flight(audio_uris[flight_id], unit_counts[flight_id]),
            prepare_ahead=config.prepare_flight_enabled,
            budget_s=config.decode_budget_seconds,
            workers=config.prepare_workers,
        )
        with gpu.section() as waited:
            entered, entered_unix = time.perf_counter(), time.time()
            if models.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(models.device)
            try:
                models.decoder_settings = apply_decoder_mode(models.asr, config.asr_cuda_graphs_enabled, models.decoder_settings)
                for flight_id, audio in feed:
                    outcomes.extend(
                        process_flight(models, flight_id, audio, units_by_flight.get(flight_id, []),
                                       config.vad_segmentation_reuse_enabled, config.asr_cuda_graphs_enabled,
                                       gpu.asr_batch_size, stats)
                    )
                    del audio
            except DecoderModeError as error:
                quarantine(str(error))
                context.log.error(f"QUARANTINED: {error}")
                # Not retried here: this process is quarantined. A rerun lands on a fresh worker (a new pod).
                raise dg.Failure(
                    description=f"worker quarantined: {error}", metadata={"quarantine": str(error)}, allow_retries=False
                ) from error
            section_s, exited_unix = time.perf_counter() - entered, time.time()
            cuda_peak = torch.cuda.max_memory_allocated(models.device) if models.device.type == "cuda" else None
        forwards = models.segmentation_forwards[0] - forwards_before
        load_wait_s, max_ahead_s = feed.load_wait_s, feed.max_ahead_s

    tables = write_tables(storage, partition, manifest, plan, outcomes, chosen, previous)
    vad_units, turns, units = tables["vad_scores", "units"], tables["diarization", "turns"], tables["transcripts", "units"]
    audio_s = float(vad_units["duration_s"].sum() or 0.0)
    run_audio_s = sum(o.duration_s for o in outcomes if o.vad is not None)
    section = {  # the step's report, once (on transcripts, the asset analysts open)
        "section_seconds": round(section_s, 3),
        "lock_wait_seconds": round(waited, 3),
        "section_entered": dg.MetadataValue.timestamp(entered_unix) if entered_unix else "not entered (no units)",
        "section_exited": dg.MetadataValue.timestamp(exited_unix) if exited_unix else "not entered (no units)",
        "vad_seconds": round(stats.seconds["vad"], 3),
        "diarization_seconds": round(stats.seconds["diarization"], 3),
        "asr_seconds": round(stats.seconds["asr"], 3),
        "asr_batch_retries": stats.asr_batch_retries,
        "flight_load_wait_seconds": round(load_wait_s, 3),
        "max_prepared_ahead_seconds": round(max_ahead_s, 1),
        "segmentation_forwards": forwards,
        "segmentation_forwards_by_stage": {k: stats.segmentation_forwards[k] for k in ("vad", "vad_of_diarized_units", "diarization")},
        "segmentation_reuse": dict(stats.segmentation_reuse),
        "decoder_modes": sorted(stats.decoder_modes),
        "switches": {
            "prepare_flight_enabled": config.prepare_flight_enabled,
            "vad_segmentation_reuse_enabled": config.vad_segmentation_reuse_enabled,
            "asr_cuda_graphs_enabled": config.asr_cuda_graphs_enabled,
        },
        "device": str(models.device) if models else "not used",
        "models": {"asr": gpu.asr_model, "diarization": gpu.diarization_pipeline},
        "model_load_seconds": round(models.load_seconds, 2) if models else "not loaded (no units to process)",
        "partitions_in_run": partitions_in_run,
        "rerun_units": sorted(chosen) if chosen is not None else "all",
        "audio_hours": round(audio_s / 3600, 4),
        "audio_seconds_per_section_second": round(run_audio_s / section_s, 2) if section_s else None,
    }
    if cuda_peak is not None:
        section["cuda_peak_memory_gib"] = round(cuda_peak / 2**30, 3)
    uris, speakers = tables["uris"], tables["diarization", "speakers"]
    return {
        "vad_scores": {
            "units": len(vad_units),
            "speech_ratio": round(float(vad_units["speech_s"].sum() or 0.0) / audio_s, 4) if audio_s else None,
            "vad_seconds": round(stats.seconds["vad"], 3),
            "segmentation_forwards": stats.segmentation_forwards["vad"],
            "units_table": dg.MetadataValue.path(uris["vad_scores", "units"]),
            "regions_table": dg.MetadataValue.path(uris["vad_scores", "regions"]),
            "regions_schema": table_schema(REGIONS_SCHEMA),
            "dagster/column_schema": table_schema(VAD_UNITS_SCHEMA),
            "dagster/row_count": len(vad_units),
        },
        "diarization": {
            "turns": len(turns),
            "speakers": len(speakers),
            "speakers_per_unit": {r["unit_id"]: r["len"] for r in speakers.group_by("unit_id", maintain_order=True).len().iter_rows(named=True)},
            "diarization_seconds": round(stats.seconds["diarization"], 3),
            "segmentation_reuse": dict(stats.segmentation_reuse),
            "segmentation_forwards": stats.segmentation_forwards["diarization"],
            "turns_table": dg.MetadataValue.path(uris["diarization", "turns"]),
            "speakers_table": dg.MetadataValue.path(uris["diarization", "speakers"]),
            "speakers_schema": table_schema(SPEAKERS_SCHEMA),
            "dagster/column_schema": table_schema(TURNS_SCHEMA),
            "dagster/row_count": len(turns),
        },
        "transcripts": section | {
            "units": len(units),
            "units_by_class": class_counts(units),
            "unit_classes": dg.MetadataValue.md(unit_classes_markdown(units)),
            "words": len(tables["transcripts", "words"]),
            "transcript": dg.MetadataValue.md(transcript_text.markdown(units, tables["transcripts", "words"]) or "(no units)"),
            "units_table": dg.MetadataValue.path(uris["transcripts", "units"]),
            "words_table": dg.MetadataValue.path(uris["transcripts", "words"]),
            "words_schema": table_schema(WORDS_SCHEMA),
            "dagster/column_schema": table_schema(TRANSCRIPT_UNITS_SCHEMA),
            "dagster/row_count": len(units),
        },
    }


def write_tables(storage: StorageResource, partition: str, manifest: pl.DataFrame, plan: pl.DataFrame, outcomes: list,
                 chosen: set[str] | None, previous: dict | None) -> dict[tuple[str, str], pl.DataFrame]:
    """Write the three assets' tables, keyed (asset, table): the whole partition replaced, or only the chosen units' rows.

    The score arrays are written while the vad_scores partition is open, so they count as this
    materialization's files; everything else the previous one left is then removed (whole runs only).
    """
    whole = chosen is None
    unit_order = manifest["unit_id"].to_list()
    with storage.replace_partition("vad_scores", partition, remove_stale=whole) as vad_out:
        vad_units, regions = vad_tables(outcomes, lambda uid, a: vad_out.write_array(a, f"scores/{vad_out.version}/{uid}"))
        turns, speakers = diarization_tables(outcomes)
        units, words = transcript_tables(manifest if whole else manifest.filter(pl.col("unit_id").is_in(list(chosen))),
                                         plan, outcomes)
        tables = {("vad_scores", "units"): vad_units, ("vad_scores", "regions"): regions,
                  ("diarization", "turns"): turns, ("diarization", "speakers"): speakers,
                  ("transcripts", "units"): units, ("transcripts", "words"): words}
        if not whole:
            tables = {key: keep_other_units(previous[key], frame, chosen, unit_order) for key, frame in tables.items()}
        uris = {("vad_scores", name): vad_out.write_parquet(tables["vad_scores", name], name) for name in ("units", "regions")}
    for asset in ("diarization", "transcripts"):
        with storage.replace_partition(asset, partition, remove_stale=whole) as out:
            uris |= {(a, name): out.write_parquet(frame, name) for (a, name), frame in tables.items() if a == asset}
    return {"uris": uris} | tables
