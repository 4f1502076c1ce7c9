"""What the GPU section's materializations show: each asset's metadata, aggregated over the shards' reports.

`partition_metadata` turns a partition's seven tables and its shard reports into the metadata of
`vad_scores`, `diarization` and `transcripts` (the section's report once, on `transcripts`, the asset analysts
open): counts, timings split into device and host work, forwards, paths, schemas and the transcript itself.
"""

import collections

import dagster as dg
import polars as pl

from batch_assets.exports import transcript_text
from batch_assets.gpu.outputs.commits import why_kind
from batch_assets.gpu.outputs.tables import TABLE_SCHEMAS
from batch_assets.gpu.steps.resources import GpuResource
from batch_assets.gpu.steps.shard_values import ShardReport
from batch_assets.orchestration.steps import class_counts
from batch_assets.schema.columns import table_schema


def unit_classes_markdown(units: pl.DataFrame, rows: int = 50) -> str:
    """Each unit's class and reason, whole (the partition page's answer to "what happened to each file")."""
    lines = ["| unit_id | class | seconds | speakers | words | reason |", "|---|---|---|---|---|---|"]
    for row in units.head(rows).iter_rows(named=True):
        seconds = f"{row['duration_s']:.1f}" if row["duration_s"] is not None else "-"
        speakers = row["num_speakers"] if row["num_speakers"] is not None else "-"
        reason = (row["reason"] or "").replace("|", "/")
        lines.append(f"| {row['unit_id']} | {row['result_class']} | {seconds} | {speakers} | {row['num_words']} | "
                     f"{reason} |")
    if len(units) > rows:
        lines.append(f"\n{len(units) - rows} more units: see `units_table`")
    return "\n".join(lines)


def _sum(reports: list[ShardReport], key: str) -> float:
    return sum(r.section[key] for r in reports if r.section)


def _model_sums(reports: list[ShardReport], key: str) -> dict[str, float]:
    """A per-model figure of the section reports, summed over the steps."""
    sums: collections.Counter = collections.Counter()
    for report in reports:
        sums.update(report.section.get(key, {}))
    return {name: round(seconds, 3) for name, seconds in sorted(sums.items())}


def partition_metadata(tables: dict, uris: dict, reports: list[ShardReport], gpu: GpuResource, chosen: set | None,
                       partitions_in_run: int, run_id: str) -> dict[str, dict]:
    vad_units, turns, units = (tables["vad_scores", "units"], tables["diarization", "turns"],
                               tables["transcripts", "units"])
    speakers, words = tables["diarization", "speakers"], tables["transcripts", "words"]
    ran = [r for r in reports if r.section]
    audio_s = float(vad_units["duration_s"].sum() or 0.0)
    section_s = _sum(reports, "section_seconds")
    counters: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in ran:
        for key in ("segmentation_forwards_by_stage", "segmentation_reuse", "embedding_work", "embedding_paths"):
            counters[key].update(r.section.get(key, {}))
    stages: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in ran:
        for stage, split in r.section.get("stage_seconds", {}).items():
            stages[stage].update(split)
    host_in_section = _sum([r for r in ran if "host_seconds_in_section" in r.section], "host_seconds_in_section")
    entered = [r.section["entered_unix"] for r in ran]
    exited = [r.section["exited_unix"] for r in ran]
    loads = [r.model_load_seconds for r in ran]
    redone = {f: why for r in reports if r.run_id == run_id for f, why in r.redone.items()}
    section = {  # the GPU work's report, once (on transcripts, the asset analysts open)
        "shards": max((r.shards for r in reports if not r.leftover), default=1),  # as planned
        # GPU steps of their own for the flights no shard step of the run processed (a re-execution's shards
        # that never started), and the flights they processed
        "leftover_steps": sum(1 for r in reports if r.leftover and r.run_id == run_id),
        "flights_finished_in_leftover_steps": sum(len(r.processed_flights) for r in reports if r.leftover),
        "shard_report": dg.MetadataValue.md(shard_markdown(reports)),
        # flights whose commits this run reused: every flight of the work but those this run's own steps processed
        "resumed_flights": len({f for r in reports for f in r.flights})
        - sum(len(r.processed_flights) for r in reports if r.run_id == run_id),
        # of those, the flights another run (stopped, failed or killed) committed, counted by that run
        "flights_reused_from_other_runs": dict(collections.Counter(
            root for r in reports if r.run_id == run_id for root in r.reused_from.values())),
        # flights whose commit this run found but could not use, processed again, and why, counted by reason
        "flights_redone": len(redone),
        "flights_redone_why": dict(collections.Counter(why_kind(why) for why in redone.values())),
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
        "host_after_section_seconds": round(sum(r.section.get("host_after_section_seconds", 0.0) for r in ran), 3),
        "batch_fallbacks": int(sum(r.section.get("batch_fallbacks", 0) for r in ran)),
        "precision": sorted({r.section.get("precision", "float32") for r in ran}),
        "flight_load_wait_seconds": round(_sum(reports, "flight_load_wait_seconds"), 3),
        "flight_load_wait_share": (round(_sum(reports, "flight_load_wait_seconds") / section_s, 4) if section_s
                                   else None),
        # the device's share of the section (model forwards' seconds) and each stage's device seconds per audio-hour
        "device_busy_share": round(sum(s["device"] for s in stages.values()) / section_s, 4) if section_s else None,
        "device_seconds_per_audio_hour": {stage: round(split["device"] * 3600 / audio_s, 2)
                                          for stage, split in stages.items() if audio_s and split["device"]},
        "max_prepared_ahead_seconds": max((r.section["max_prepared_ahead_seconds"] for r in ran), default=0.0),
        "segmentation_forwards": int(_sum(reports, "segmentation_forwards")),
        "segmentation_forwards_by_stage": {k: counters["segmentation_forwards_by_stage"][k]
                                           for k in ("vad", "vad_of_diarized_units", "diarization")},
        "segmentation_reuse": dict(counters["segmentation_reuse"]),
        # diarization's embedding step: trunk forwards (stock: one per chunk and local speaker), the audio seconds
        # through the trunk, pooled pairs, and pairs given a neighbour's embedding (approximate lever B)
        "embedding_work": {k: round(counters["embedding_work"][k], 1) if k == "trunk_seconds"
                           else counters["embedding_work"][k]
                           for k in ("chunks", "pairs", "active_pairs", "trunk_forwards", "trunk_seconds",
                                     "pooled_pairs", "copied_pairs")},
        "embedding_paths": dict(counters["embedding_paths"]),
        "decoder_modes": sorted({m for r in ran for m in r.section["decoder_modes"]}),
        # flights with nothing to transcribe: no ASR call, so no decoder check (graphs are captured lazily)
        "decoder_checks_skipped": sum(r.section.get("decoder_checks_skipped", 0) for r in ran),
        "switches": reports[0].switches if reports else {},
        "device": ran[0].device if ran else "not used",
        "models": {"asr": gpu.routing(), "language_id": gpu.language_id_model, "diarization": gpu.diarization_pipeline},
        # ASR models loaded per shard step: at most one load of each model per step, only where it had units
        "asr_model_loads": [r.section.get("asr_model_loads", {}) for r in ran],
        "asr_model_load_seconds": [r.section.get("asr_model_load_seconds", {}) for r in ran],
        # ASR seconds per model over the run's steps: where the ASR stage's time went, model by model
        "asr_seconds_by_model": _model_sums(ran, "asr_seconds_by_model"),
        "language_id_seconds": round(sum(r.section.get("language_id_seconds", 0.0) for r in ran), 3),
        "model_load_seconds": max(loads) if loads else "not loaded (nothing to process)",
        "partitions_in_run": partitions_in_run,
        "rerun_units": sorted(chosen) if chosen is not None else "all",
        "audio_hours": round(audio_s / 3600, 4),
        "audio_seconds_per_section_second": round(_sum(reports, "audio_seconds") / section_s, 2) if section_s else None,
    }
    rss = [r.step_peak_rss_mib for r in ran if r.step_peak_rss_mib]
    if rss:
        section["gpu_step_peak_rss_mib"] = max(rss)
    peaks = [r.section["cuda_peak_bytes"] for r in ran if r.section["cuda_peak_bytes"]]
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
            "speakers_per_unit": {r["unit_id"]: r["len"] for r in
                                  speakers.group_by("unit_id", maintain_order=True).len().iter_rows(named=True)},
            "diarization_seconds": section["diarization_seconds"],
            "segmentation_reuse": section["segmentation_reuse"],
            "segmentation_forwards": counters["segmentation_forwards_by_stage"]["diarization"],
        } | tables_metadata(tables, uris, "diarization", "turns", "speakers"),
        "transcripts": section | {
            "units": len(units),
            "units_by_class": class_counts(units),
            "units_by_language": language_counts(units),
            "unit_classes": dg.MetadataValue.md(unit_classes_markdown(units)),
            "words": len(words),
            "segments": len(tables["transcripts", "segments"]),
            "transcript": dg.MetadataValue.md(transcript_text.markdown(units, words) or "(no units)"),
        } | tables_metadata(tables, uris, "transcripts", "units", "words")
          | tables_metadata(tables, uris, "transcripts", "units", "segments"),
    }


def language_counts(units) -> dict[str, dict]:
    """Per language (`none`: no language known: silent, or not processed): units and audio-hours, and the source."""
    counts = {}
    for row in (units.group_by(pl.col("language").fill_null("none"), maintain_order=True)
                .agg(pl.len().alias("units"), pl.col("duration_s").sum().alias("seconds"),
                     pl.col("language_source").drop_nulls().unique().sort().alias("sources"))
                .sort("language").iter_rows(named=True)):
        counts[row["language"]] = {"units": row["units"], "audio_hours": round((row["seconds"] or 0.0) / 3600, 4),
                                   "sources": row["sources"]}
    return counts


def tables_metadata(tables: dict, uris: dict, asset: str, main: str, other: str) -> dict:
    """An asset's two tables for the UI: paths, the main table's schema and row count, the other's schema."""
    return {
        f"{main}_table": dg.MetadataValue.path(uris[asset, main]),
        f"{other}_table": dg.MetadataValue.path(uris[asset, other]),
        f"{other}_schema": table_schema(TABLE_SCHEMAS[asset, other]),
        "dagster/column_schema": table_schema(TABLE_SCHEMAS[asset, main]),
        "dagster/row_count": len(tables[asset, main]),
    }


def shard_markdown(reports: list[ShardReport]) -> str:
    lines = ["| step | flights | resumed | taken over | audio s | section s | model load s | step peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|"]
    for r in reports:
        sec = r.section or {}
        load = r.model_load_seconds if r.model_load_seconds is not None else "-"
        step = f"leftover {r.shard}" if r.leftover else f"shard {r.shard}"
        lines.append(f"| {step} | {len(r.flights)} | {len(r.resumed_flights)} | {len(r.taken_over)} | "
                     f"{r.audio_s:.1f} | {sec.get('section_seconds', 0.0):.1f} | {load} | {r.step_peak_rss_mib} |")
    return "\n".join(lines)
