"""Turn the section's per-unit outcomes into the three assets' parquet tables (columns: docs/outputs.md).

Words carry their `segment_index`: a segment is a speaker turn, the consecutive words of one speaker in a
unit, and the `segments` table holds each turn with its text (what the exports and `batch-assets show` print).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from batch_assets.gpu.section.flight import UnitOutcome
from batch_assets.ingest.speaker_hints import KEYS as HINT_KEYS
from batch_assets.ingest.speaker_hints import UNHINTED, AppliedHints
from batch_assets.models.languages import UNSPACED, word_separator
from batch_assets.schema.results import ResultClass

VAD_UNITS_SCHEMA = {
    "unit_id": pl.String, "flight_id": pl.String, "duration_s": pl.Float64, "speech_s": pl.Float64,
    "num_regions": pl.Int64, "num_chunks": pl.Int64, "frames_per_chunk": pl.Int64, "local_speakers": pl.Int64,
    "chunk_duration_s": pl.Float64, "chunk_step_s": pl.Float64, "scores_uri": pl.String,
}
REGIONS_SCHEMA = {"unit_id": pl.String, "start_s": pl.Float64, "end_s": pl.Float64}
TURNS_SCHEMA = {"unit_id": pl.String, "start_s": pl.Float64, "end_s": pl.Float64, "speaker": pl.String,
                "exclusive": pl.Boolean, "channel": pl.Int64}
SPEAKERS_SCHEMA = {
    "unit_id": pl.String, "speaker": pl.String, "speech_s": pl.Float64, "embedding": pl.List(pl.Float32),
    "segmentation": pl.String, "embedding_path": pl.String,
}
TRANSCRIPT_UNITS_SCHEMA = {
    "unit_id": pl.String, "source_uri": pl.String, "result_class": pl.String, "reason": pl.String,
    "duration_s": pl.Float64, "declared_duration_s": pl.Float64, "speech_s": pl.Float64, "num_speakers": pl.Int64,
    "num_words": pl.Int64, "text": pl.String, "hint_num_speakers": pl.Int64, "hint_min_speakers": pl.Int64,
    "hint_max_speakers": pl.Int64, "hint_source": pl.String, "language": pl.String, "language_source": pl.String,
    "language_confidence": pl.Float64, "asr_model": pl.String, "sha256": pl.String, "channels": pl.Int64,
    "channel_reading": pl.String, "channel_source": pl.String, "channel_lead": pl.Float64,
}
CHANNEL_COLUMNS = ("channels", "channel_reading", "channel_source", "channel_lead")
LANGUAGE_COLUMNS = ("language", "language_source", "language_confidence", "asr_model")
WORDS_SCHEMA = {
    "unit_id": pl.String, "segment_index": pl.Int64, "word_index": pl.Int64, "start_s": pl.Float64, "end_s": pl.Float64,
    "word": pl.String, "speaker": pl.String, "score": pl.Float64, "channel": pl.Int64,
}
SEGMENTS_SCHEMA = {
    "unit_id": pl.String, "segment_index": pl.Int64, "speaker": pl.String, "start_s": pl.Float64, "end_s": pl.Float64,
    "text": pl.String, "num_words": pl.Int64, "channel": pl.Int64,
}


def vad_tables(outcomes: list[UnitOutcome], write_scores) -> tuple[pl.DataFrame, pl.DataFrame]:
    units, regions = [], []
    for o in outcomes:
        if o.vad is None:
            continue
        scores = o.vad.scores
        window = scores.sliding_window
        units.append({
            "unit_id": o.unit_id, "flight_id": o.flight_id, "duration_s": o.duration_s, "speech_s": o.vad.speech_s,
            "num_regions": len(o.vad.regions), "num_chunks": scores.data.shape[0],
            "frames_per_chunk": scores.data.shape[1], "local_speakers": scores.data.shape[2],
            "chunk_duration_s": float(window.duration), "chunk_step_s": float(window.step),
            "scores_uri": write_scores(o.unit_id, np.asarray(scores.data, dtype=np.float32)),
        })
        regions.extend({"unit_id": o.unit_id, "start_s": s, "end_s": e} for s, e in o.vad.regions)
    return pl.DataFrame(units, schema=VAD_UNITS_SCHEMA), pl.DataFrame(regions, schema=REGIONS_SCHEMA)


def diarization_tables(outcomes: list[UnitOutcome]) -> tuple[pl.DataFrame, pl.DataFrame]:
    turns, speakers = [], []
    for o in outcomes:
        d = o.diarization
        if d is None:
            continue
        for exclusive, source in ((False, d.turns), (True, d.exclusive_turns)):
            turns.extend({"unit_id": o.unit_id, "start_s": s, "end_s": e, "speaker": label, "exclusive": exclusive,
                          "channel": o.channel_of.get(label)} for s, e, label in source)
        for label in sorted({t[2] for t in d.turns}):
            speech = sum(e - s for s, e, lab in d.turns if lab == label)
            embedding = d.embeddings.get(label)
            speakers.append({
                "unit_id": o.unit_id, "speaker": label, "speech_s": speech,
                "embedding": None if embedding is None else embedding.tolist(),
                # a one-party channel's speaker (`gpu/section/channels.py`): its speech, nothing diarized
                "segmentation": "channel" if label in o.solo_speakers else d.reuse,
                "embedding_path": "not run" if label in o.solo_speakers else d.embedding_work.path,
            })
    return pl.DataFrame(turns, schema=TURNS_SCHEMA), pl.DataFrame(speakers, schema=SPEAKERS_SCHEMA)


OUTCOMES_SCHEMA = {  # the section's per-unit result, as a flight commit stores it (tables assemble from it)
    "unit_id": pl.String, "flight_id": pl.String, "duration_s": pl.Float64, "result_class": pl.String,
    "reason": pl.String, "speech_s": pl.Float64, "num_speakers": pl.Int64, "num_words": pl.Int64, "text": pl.String,
    "language": pl.String, "language_source": pl.String, "language_confidence": pl.Float64, "asr_model": pl.String,
    "sha256": pl.String, "channels": pl.Int64, "channel_reading": pl.String, "channel_source": pl.String,
    "channel_lead": pl.Float64,
}


def _channel_columns(reading) -> dict:
    """The units table's channel columns of a `source/channels.py: ChannelReading` (None: not read)."""
    if reading is None:
        return dict.fromkeys(CHANNEL_COLUMNS)
    return {"channels": reading.channels, "channel_reading": "mono" if reading.channels == 1 else reading.reading,
            "channel_source": None if reading.channels == 1 else reading.source, "channel_lead": reading.lead}


def outcome_tables(outcomes: list[UnitOutcome]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per-unit outcomes, words) of the section's units: what a flight commit keeps for `transcripts`."""
    rows, words = [], []
    for o in outcomes:
        transcribed = o.result_class is ResultClass.TRANSCRIBED or (o.result_class is ResultClass.TRUNCATED
                                                                   and o.diarization is not None)
        unit_words = [w for w, _ in o.words] if transcribed else []
        rows.append({
            "unit_id": o.unit_id, "flight_id": o.flight_id, "duration_s": o.duration_s,
            "result_class": str(o.result_class), "reason": o.reason, "speech_s": o.vad.speech_s if o.vad else None,
            "num_speakers": len({t[2] for t in o.diarization.turns}) if o.diarization else (0 if o.vad else None),
            "num_words": len(unit_words), "text": word_separator(o.language).join(w.word for w in unit_words),
            "sha256": o.sha256,
        } | {key: getattr(o, key) for key in LANGUAGE_COLUMNS} | _channel_columns(o.channel_reading))
        if transcribed:
            words.extend({"unit_id": o.unit_id, "segment_index": seg, "word_index": i, "start_s": w.start_s,
                          "end_s": w.end_s, "word": w.word, "speaker": spk, "score": w.score,
                          "channel": o.channel_of.get(spk)}
                         for i, ((w, spk), seg) in enumerate(zip(o.words, segment_indices([s for _, s in o.words]),
                                                                 strict=True)))
    return pl.DataFrame(rows, schema=OUTCOMES_SCHEMA), pl.DataFrame(words, schema=WORDS_SCHEMA)


def segment_indices(speakers: list[str | None]) -> list[int]:
    """Each word's speaker turn: a new segment wherever the speaker changes (a null speaker is a speaker too)."""
    indices, current = [], -1
    for i, speaker in enumerate(speakers):
        if i == 0 or speaker != speakers[i - 1]:
            current += 1
        indices.append(current)
    return indices


def segments_table(words: pl.DataFrame, unspaced: Iterable[str] = ()) -> pl.DataFrame:
    """One row per speaker turn (unit_id, segment_index) with its text, from the words table (in its order); the
    words of `unspaced` units (a language written without spaces: `models/languages.py`) joined with nothing."""
    unspaced = sorted(unspaced)
    return (words.group_by("unit_id", "segment_index", maintain_order=True)
            .agg(pl.col("speaker").first(), pl.col("start_s").first(), pl.col("end_s").last(),
                 pl.col("word").str.join(" ").alias("text"), pl.col("word").str.join("").alias("_unspaced"),
                 pl.len().cast(pl.Int64).alias("num_words"), pl.col("channel").first())
            .with_columns(pl.when(pl.col("unit_id").is_in(unspaced)).then(pl.col("_unspaced"))
                          .otherwise(pl.col("text")).alias("text"))
            .select(list(SEGMENTS_SCHEMA)).cast(SEGMENTS_SCHEMA))


def unspaced_units(units: pl.DataFrame) -> list[str]:
    """The units of a `transcripts/units` table (or a commit's outcomes) whose language is written without spaces."""
    return units.filter(pl.col("language").is_in(sorted(UNSPACED)))["unit_id"].to_list()


def _hint_columns(applied: AppliedHints) -> dict:
    """The units table's hint columns for one unit: what diarization was given, and from where."""
    return {f"hint_{key}": getattr(applied.hints, key) for key in HINT_KEYS} | {"hint_source": applied.source}


def transcript_tables(manifest: pl.DataFrame, plan: pl.DataFrame, outcomes: pl.DataFrame, words: pl.DataFrame,
                      hints: dict[str, AppliedHints] | None = None,
                      ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(units, segments, words): every manifest unit exactly once, with its final class (ingest's, prepare's,
    or the section's `outcomes`) and, if it reached diarization, the speaker hints it was given there (`hints`:
    each unit's hints and their source, `run_config.unit_speaker_hints`; a bad sidecar's problem joins its
    reason)."""
    hints = hints or {}
    by_unit = {row["unit_id"]: row for row in outcomes.iter_rows(named=True)}
    planned = {row["unit_id"]: row for row in plan.iter_rows(named=True)}
    units = []
    for row in manifest.iter_rows(named=True):
        uid = row["unit_id"]
        base = {"unit_id": uid, "source_uri": row["source_uri"], "duration_s": row["duration_s"],
                "channels": row.get("channels"),
                "declared_duration_s": row["duration_s"], "speech_s": None, "num_speakers": None, "num_words": 0,
                "text": ""}
        note = row.get("hint_problem")
        if row["result_class"] != ResultClass.OK:
            units.append(base | {"result_class": row["result_class"], "reason": row["reason"]})
            continue
        plan_row = planned.get(uid)
        if plan_row is None or plan_row["result_class"] != ResultClass.OK:
            reason = plan_row["reason"] if plan_row else "missing from the flight plan"
            units.append(base | {"result_class": plan_row["result_class"] if plan_row else str(ResultClass.FAILED),
                                 "reason": reason})
            continue
        o = by_unit.get(uid)
        if o is None:
            units.append(base | {"result_class": str(ResultClass.FAILED), "reason": "not processed by the GPU section"})
            continue
        result_class, reason = o["result_class"], o["reason"]
        reason = "; ".join(r for r in (reason, note) if r)
        diarized = o["speech_s"] is not None and o["result_class"] != ResultClass.SILENT  # the hints reached
        # diarization
        units.append(base | {key: o[key] for key in ("duration_s", "speech_s", "num_speakers", "num_words", "text",
                                                     "sha256", *LANGUAGE_COLUMNS, *CHANNEL_COLUMNS)
                                if o[key] is not None or key != "channels"}
                     | (_hint_columns(hints.get(uid, UNHINTED)) if diarized else {})
                     | {"result_class": result_class, "reason": reason})
    rank = {uid: i for i, uid in enumerate(manifest["unit_id"])}
    kept = (words.filter(pl.col("unit_id").is_in(list(rank)))
            .with_columns(pl.col("unit_id").replace_strict(rank).alias("_rank"))
            .sort("_rank", "word_index", maintain_order=True).drop("_rank"))
    units = pl.DataFrame(units, schema=TRANSCRIPT_UNITS_SCHEMA)
    return units, segments_table(kept, unspaced_units(units)), kept


TABLE_SCHEMAS = {
    ("vad_scores", "units"): VAD_UNITS_SCHEMA, ("vad_scores", "regions"): REGIONS_SCHEMA,
    ("diarization", "turns"): TURNS_SCHEMA, ("diarization", "speakers"): SPEAKERS_SCHEMA,
    ("transcripts", "units"): TRANSCRIPT_UNITS_SCHEMA, ("transcripts", "segments"): SEGMENTS_SCHEMA,
    ("transcripts", "words"): WORDS_SCHEMA,
}


def tables_to_keep(storage, partition: str, manifest: pl.DataFrame,
                   rerun: set[str]) -> dict[tuple[str, str], pl.DataFrame]:
    """The partition's current tables, before a rerun of the units `rerun`; raises ValueError if they cannot be kept.

    Keeping other units' rows is only sound when the current tables are complete, written with today's schemas, and
    cover the units of the current manifest, but for units this rerun adds (late audio, `ingest/late_audio.py`);
    otherwise the whole partition must run.
    """
    tables = {}
    for (asset, name), schema in TABLE_SCHEMAS.items():
        try:
            frame = storage.read_parquet(asset, partition, name)
        except FileNotFoundError as error:
            raise ValueError(f"{asset}/{name} is missing for {partition}: rerun the whole partition") from error
        if dict(frame.schema) != schema:
            raise ValueError(f"{asset}/{name} of {partition} has an older schema: rerun the whole partition")
        tables[asset, name] = frame
    published, listed = set(tables["transcripts", "units"]["unit_id"]), set(manifest["unit_id"])
    if not published <= listed or not listed - published <= rerun:
        raise ValueError(f"transcripts of {partition} do not cover the current manifest: rerun the whole partition")
    return tables


def keep_other_units(previous: pl.DataFrame, new_rows: pl.DataFrame, rerun: set[str],
                     unit_order: list[str]) -> pl.DataFrame:
    """A table after rerunning some units: the previous rows of every other unit, plus the rerun units' new rows.

    Rows are ordered by the manifest's unit order, then by their order within the unit, as a whole run writes them.
    """
    kept = previous.filter(~pl.col("unit_id").is_in(list(rerun)))
    rank = {uid: i for i, uid in enumerate(unit_order)}
    merged = pl.concat([kept, new_rows], how="vertical").with_row_index("_row")
    merged = merged.with_columns(pl.col("unit_id").replace_strict(rank, default=len(rank)).alias("_rank"))
    return merged.sort("_rank", "_row").drop("_rank", "_row")
