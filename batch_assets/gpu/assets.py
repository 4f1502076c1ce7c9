"""`vad_scores`, `diarization` and `transcripts`: one GPU multi-asset, one resource-locked section.

The three outputs come from one step because they share the expensive state: the models on the device
and each flight's audio. The step declares `pool="gpu"` (Dagster concurrency pool, sized to the GPUs)
and asks dagster-k8s for one `nvidia.com/gpu` in its own op tags (job tags do not reach step pods).
Inside, the cross-process device lock guarantees that only one step at a time runs on the device.
"""

import collections
import time

import dagster as dg
import polars as pl
from pydantic import Field

from batch_assets.gpu.asr import DecoderModeError, apply_decoder_mode
from batch_assets.gpu.flight_feed import FlightFeed
from batch_assets.gpu.resources import GpuResource, quarantine
from batch_assets.gpu.tables import VAD_UNITS_SCHEMA, diarization_tables, transcript_tables, vad_tables
from batch_assets.ingest.assets import class_counts, fetched_audio, prepared_flights, table_schema
from batch_assets.ingest.flights import DECODE_BUDGET_S
from batch_assets.partitions import daily_partitions
from batch_assets.storage import StorageResource
from batch_assets.switches import SWITCH_DEFAULTS

GROUP = "gpu"
GPU_POOL = "gpu"
GPU_K8S_CONFIG = {
    "container_config": {
        "resources": {
            "limits": {"nvidia.com/gpu": "1"},
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


def markdown_preview(units: pl.DataFrame, rows: int = 5, chars: int = 120) -> str:
    lines = ["| unit_id | result_class | words | text |", "|---|---|---|---|"]
    for row in units.head(rows).iter_rows(named=True):
        text = (row["text"] or "")[:chars].replace("|", " ")
        lines.append(f"| {row['unit_id']} | {row['result_class']} | {row['num_words']} | {text} |")
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
    pool=GPU_POOL,
    op_tags={"dagster-k8s/config": GPU_K8S_CONFIG},
    retry_policy=dg.RetryPolicy(max_retries=1, delay=30),
)
def gpu_section(
    context: dg.AssetExecutionContext, config: GpuSectionConfig, storage: StorageResource, gpu: GpuResource
):
    # Imported here, not at module top: pyannote and NeMo must stay out of code-location load.
    import torch

    from batch_assets.gpu.section import SectionStats, process_flight

    partition = context.partition_key
    manifest = storage.read_parquet("fetched_audio", partition, "manifest")
    plan = storage.read_parquet("prepared_flights", partition, "plan")
    flights = storage.read_parquet("prepared_flights", partition, "flights")
    audio_uris = dict(zip(flights["flight_id"], flights["audio_uri"], strict=True))
    unit_counts = dict(zip(flights["flight_id"], flights["num_units"], strict=True))
    ok_units = plan.filter(pl.col("result_class") == "ok")
    units_by_flight: dict[str, list[dict]] = collections.defaultdict(list)
    for row in ok_units.iter_rows(named=True):
        units_by_flight[row["flight_id"]].append(row)

    models = gpu.models
    stats = SectionStats()
    outcomes = []
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

    for asset in ("vad_scores", "diarization", "transcripts"):
        storage.clear_partition(asset, partition)
    vad_units, regions = vad_tables(outcomes, lambda uid, a: storage.write_array(a, "vad_scores", partition, f"scores/{uid}"))
    turns, speakers = diarization_tables(outcomes)
    units, words = transcript_tables(manifest, plan, outcomes)
    storage.write_parquet(vad_units, "vad_scores", partition, "units")
    storage.write_parquet(regions, "vad_scores", partition, "regions")
    storage.write_parquet(turns, "diarization", partition, "turns")
    storage.write_parquet(speakers, "diarization", partition, "speakers")
    units_uri = storage.write_parquet(units, "transcripts", partition, "units")
    words_uri = storage.write_parquet(words, "transcripts", partition, "words")

    audio_s = float(vad_units["duration_s"].sum() or 0.0)
    shared = {
        "section_seconds": round(section_s, 3),
        "lock_wait_seconds": round(waited, 3),
        "section_entered_unix": entered_unix,
        "section_exited_unix": exited_unix,
        "vad_seconds": round(stats.seconds["vad"], 3),
        "diarization_seconds": round(stats.seconds["diarization"], 3),
        "asr_seconds": round(stats.seconds["asr"], 3),
        "asr_batch_retries": stats.asr_batch_retries,
        "flight_load_wait_seconds": round(feed.load_wait_s, 3),
        "max_prepared_ahead_seconds": round(feed.max_ahead_s, 1),
        "segmentation_forwards": models.segmentation_forwards[0] - forwards_before,
        "segmentation_forwards_by_stage": {k: stats.segmentation_forwards[k] for k in ("vad", "vad_of_diarized_units", "diarization")},
        "segmentation_reuse": dict(stats.segmentation_reuse),
        "decoder_modes": sorted(stats.decoder_modes),
        "switches": {
            "prepare_flight_enabled": config.prepare_flight_enabled,
            "vad_segmentation_reuse_enabled": config.vad_segmentation_reuse_enabled,
            "asr_cuda_graphs_enabled": config.asr_cuda_graphs_enabled,
        },
        "device": str(models.device),
        "models": {"asr": gpu.asr_model, "diarization": gpu.diarization_pipeline},
        "model_load_seconds": round(models.load_seconds, 2),
        "audio_hours": round(audio_s / 3600, 4),
        "audio_seconds_per_section_second": round(audio_s / section_s, 2) if section_s else None,
    }
    if cuda_peak is not None:
        shared["cuda_peak_memory_gib"] = round(cuda_peak / 2**30, 3)

    yield dg.MaterializeResult(asset_key="vad_scores", metadata=shared | {
        "units": len(vad_units),
        "speech_ratio": round(float(vad_units["speech_s"].sum() or 0.0) / audio_s, 4) if audio_s else None,
        "dagster/column_schema": table_schema(VAD_UNITS_SCHEMA),
        "dagster/row_count": len(vad_units),
    })
    yield dg.MaterializeResult(asset_key="diarization", metadata=shared | {
        "turns": len(turns),
        "speakers": len(speakers),
        "dagster/column_schema": table_schema(dict(turns.schema)),
        "dagster/row_count": len(turns),
    })
    yield dg.MaterializeResult(asset_key="transcripts", metadata=shared | {
        "units": len(units),
        "units_by_class": class_counts(units),
        "words": len(words),
        "units_table": dg.MetadataValue.path(units_uri),
        "words_table": dg.MetadataValue.path(words_uri),
        "preview": dg.MetadataValue.md(markdown_preview(units)),
        "dagster/column_schema": table_schema(dict(units.schema)),
        "dagster/row_count": len(units),
    })

