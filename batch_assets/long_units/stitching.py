"""A windowed unit's windows stitched back into one unit, at assembly (`windows.py` cuts them). No Dagster.

Every window's times are shifted to the unit's clock; each window keeps its *core*, from the middle of the overlap
with the previous window to the middle of the overlap with the next (a word belongs to the window whose core holds
its midpoint; turns and speech regions are clipped to the cores and rejoined where they meet); a unit one of whose
windows failed is `failed`, its reason naming the window, with no other rows (its other windows' results are not
published: rerun the unit); a unit whose stream ended before its last windows (decoded shorter than listed) is
`truncated`, its reason naming the first window not reached, with the rows of the windows that decoded, as a whole
unit cut short keeps its words (where the listed length was only an estimate, `duration_estimated`, the windows past
the stream's end are dropped and the unit is what decoded, not truncated); and the windows' speakers are linked
(`windows.link_speakers`), so a voice keeps one label for the whole recording. The segmentation scores of the cores
are written as one array on the unit's own regular chunk grid (windows start on whole seconds, a multiple of the
segmentation step), streamed window by window.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import numpy as np
import polars as pl

from batch_assets.gpu.outputs.tables import CHANNEL_COLUMNS, LANGUAGE_COLUMNS, segment_indices
from batch_assets.ingest.speaker_hints import NO_HINTS, SpeakerHints
from batch_assets.long_units.windows import LINK_THRESHOLD, Window, cores, link_unit_speakers, windows_by_unit
from batch_assets.models.languages import word_separator
from batch_assets.schema.results import SILENT_REASON, ResultClass
from batch_assets.source.ffmpeg import DECODER_STOPPED


def _rejoin(frame: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Join rows (in time order within each `keys` group) that meet end to start, as clipping at a core edge cut
    them."""
    if frame.is_empty():
        return frame
    rows, out = frame.to_dicts(), []
    last: dict[tuple, dict] = {}
    for row in rows:
        key = tuple(row[k] for k in keys)
        prev = last.get(key)
        if prev is not None and abs(prev["end_s"] - row["start_s"]) < 1e-9:
            prev["end_s"] = row["end_s"]
            continue
        out.append(row)
        last[key] = row
    return pl.DataFrame(out, schema=frame.schema)


def _stitched_scores(rows: list[dict], windows: list[Window], unit_cores: list[tuple[float, float]],
                     read_array: Callable[[str], np.ndarray]) -> tuple[int, Iterator[bytes], tuple[int, int]]:
    """(chunks, the .npy bytes in pieces, (frames, local speakers)) of the cores' segmentation scores on the unit's
    chunk grid: from each window, the chunks that start in its core (cut earlier where the window has no chunk
    starting that late); one window's array read at a time. Raises ValueError where the windows leave chunks of
    the grid to no window (an overlap shorter than the segmentation's chunk)."""
    step = rows[0]["chunk_step_s"]
    starts = [w.start_s + step * np.arange(row["num_chunks"]) for row, w in zip(rows, windows, strict=True)]
    cuts = [unit_cores[0][0]] + [min(hi, s[-1] + step) for (_, hi), s in zip(unit_cores[:-1], starts[:-1], strict=True)]
    picks = []
    for i, (w, s) in enumerate(zip(windows, starts, strict=True)):
        if s[0] > cuts[i] + 1e-6:
            raise ValueError(f"window {w.index} starts at {w.start_s:.0f} s, after the previous window's last chunk "
                             f"({cuts[i]:.1f} s): window_overlap_seconds must be at least the segmentation's chunk "
                             f"({rows[0]['chunk_duration_s']:.0f} s)")
        end = np.inf if i == len(windows) - 1 else cuts[i + 1] - 1e-6
        picks.append(np.flatnonzero((s >= cuts[i] - 1e-6) & (s < end)))
    shape = (sum(len(p) for p in picks), rows[0]["frames_per_chunk"], rows[0]["local_speakers"])

    def chunks() -> Iterator[bytes]:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": np.dtype(np.float32).str, "fortran_order": False,
                                                      "shape": shape})
        yield header.getvalue()
        for row, pick in zip(rows, picks, strict=True):
            yield np.ascontiguousarray(read_array(row["scores_uri"])[pick], dtype=np.float32).tobytes()

    return shape[0], chunks(), shape[1:]


def _window_reason(o: dict, w: Window, windows: list[Window]) -> str:
    return f"window {w.index} ({w.start_s:.0f}-{w.start_s + w.duration_s:.0f} s) of {len(windows)}: {o['reason']}"


# A window in one of these classes leaves the unit in it (the first found), with no other rows: rerun the unit
UNPROCESSED = (ResultClass.FAILED, ResultClass.FETCH_FAILED, ResultClass.CHANGED_SINCE_LISTED,
               ResultClass.UNDECODABLE, ResultClass.EMPTY, ResultClass.TRUNCATED)


def _unit_class(outcomes: list[dict], windows: list[Window]) -> tuple[str, str]:
    """A windowed unit's class: failed if a window failed; silent if all were; unsupported_language if no window was
    transcribed and one was in a language without a model; else transcribed (its reason naming any window whose
    language had no model: that window has no words)."""
    def first(cls: ResultClass) -> str | None:
        found = [(o, w) for o, w in zip(outcomes, windows, strict=True) if o["result_class"] == cls]
        return _window_reason(*found[0], windows)[:500] if found else None

    for cls in UNPROCESSED:
        if (failed := first(cls)) is not None:
            return str(cls), failed
    if all(o["result_class"] == ResultClass.SILENT for o in outcomes):
        return str(ResultClass.SILENT), SILENT_REASON
    unsupported = first(ResultClass.UNSUPPORTED_LANGUAGE)
    if not any(o["result_class"] == ResultClass.TRANSCRIBED for o in outcomes):
        return str(ResultClass.UNSUPPORTED_LANGUAGE), unsupported or ""
    return str(ResultClass.TRANSCRIBED), unsupported or ""


def _unit_language(outcomes: list[dict]) -> dict:
    """A windowed unit's language columns: those of the language its windows speak longest (ties: the first)."""
    speech: dict[str, float] = {}
    for o in outcomes:
        if o["language"] is not None:
            speech[o["language"]] = speech.get(o["language"], 0.0) + (o["speech_s"] or 0.0)
    if not speech:
        return dict.fromkeys(LANGUAGE_COLUMNS)
    language = max(speech, key=lambda lang: (speech[lang], -list(speech).index(lang)))
    row = next(o for o in outcomes if o["language"] == language)
    confidences = [o["language_confidence"] for o in outcomes
                   if o["language"] == language and o["language_confidence"] is not None]
    return {key: row[key] for key in LANGUAGE_COLUMNS} | {
        "language_confidence": round(min(confidences), 6) if confidences else None}


def stitch(fragments: dict[str, pl.DataFrame], plan: pl.DataFrame,
           write_scores: Callable[[str, Iterator[bytes]], str], read_array: Callable[[str], np.ndarray],
           hints: dict[str, SpeakerHints] | None = None, threshold: float = LINK_THRESHOLD,
           estimated: set[str] = frozenset()) -> dict[str, pl.DataFrame]:
    """The flight commits' fragments with every windowed unit's window rows replaced by the unit's own rows.

    `write_scores(unit_id, npy_chunks)` stores a unit's stitched scores and returns their URI. `estimated`: the
    units whose listed length was an estimate (windows planned past the end of the stream say nothing about the
    object). Rows of units that were not windowed pass through untouched, in their order; a windowed unit's rows
    take its first window's place. A windowed unit whose windows were not processed (not `ok` in the plan) has no
    rows: its class is the plan's.
    """
    units = windows_by_unit(plan)
    if not units:
        return fragments
    made = {}
    for uid, windows in units.items():
        rows = _stitch_unit(fragments, uid, windows, write_scores, read_array, (hints or {}).get(uid, NO_HINTS),
                            threshold, uid in estimated)
        if rows is not None:
            made[uid] = rows
    owner = {w.piece: uid for uid, ws in units.items() for w in ws}
    out = {}
    for name, frame in fragments.items():
        parts, placed = [], set()
        for piece, rows in _runs(frame):
            uid = owner.get(piece)
            if uid is None:
                parts.append(rows)
            elif uid in made and uid not in placed:
                parts.append(made[uid][name].select(frame.columns).cast(frame.schema))
                placed.add(uid)
        parts += [made[uid][name].select(frame.columns).cast(frame.schema) for uid in made if uid not in placed]
        out[name] = pl.concat(parts) if parts else frame
    return out


def _on_unit_clock(frame: pl.DataFrame, uid: str, windows: list[Window], unit_cores: list[tuple[float, float]],
                   by_midpoint: bool = False) -> list[pl.DataFrame]:
    """Each window's timed rows shifted to the unit's clock and kept to its core: clipped to it (turns, regions), or,
    `by_midpoint`, the rows whose midpoint it holds (words; the last window keeps its end)."""
    kept = []
    for w, (lo, hi) in zip(windows, unit_cores, strict=True):
        rows = frame.filter(pl.col("unit_id") == w.piece).with_columns(
            pl.col("start_s") + w.start_s, pl.col("end_s") + w.start_s, pl.lit(uid).alias("unit_id"))
        if by_midpoint:
            middle = (pl.col("start_s") + pl.col("end_s")) / 2
            rows = rows.filter((middle >= lo) & ((middle < hi) | (w is windows[-1])))
        else:
            rows = rows.with_columns(pl.col("start_s").clip(lo, hi), pl.col("end_s").clip(lo, hi))
            rows = rows.filter(pl.col("end_s") > pl.col("start_s"))
        kept.append(rows)
    return kept


def _stitch_unit(fragments: dict[str, pl.DataFrame], uid: str, windows: list[Window], write_scores, read_array,
                 hints: SpeakerHints, threshold: float, estimated: bool = False) -> dict[str, pl.DataFrame] | None:
    """One windowed unit's rows in each fragment table (None when its windows were not processed)."""
    pieces = [w.piece for w in windows]
    outcomes = {r["unit_id"]: r
                for r in fragments["outcomes"].filter(pl.col("unit_id").is_in(pieces)).iter_rows(named=True)}
    if len(outcomes) < len(pieces):
        return None
    ordered = [outcomes[p] for p in pieces]
    cut = next((i for i, o in enumerate(ordered) if o["result_class"] == ResultClass.TRUNCATED), None)
    cut_reason = None
    if cut and all(o["result_class"] == ResultClass.TRUNCATED for o in ordered[cut:]):
        # the stream ended before these windows: the unit is the windows that decoded, classed truncated
        stopped = any(DECODER_STOPPED in (o["reason"] or "") for o in ordered[cut:])  # the decoder gave up
        cut_reason = None if estimated and not stopped else _window_reason(ordered[cut], windows[cut], windows)
        windows, pieces, ordered = windows[:cut], pieces[:cut], ordered[:cut]  # an estimate's windows past the
        # stream's end are no cut
    unit_cores, index = cores(windows), {p: i for i, p in enumerate(pieces)}
    result_class, reason = _unit_class(ordered, windows)
    duration = windows[-1].start_s + ordered[-1]["duration_s"]
    sha256 = next((o["sha256"] for o in ordered if o.get("sha256")), None)
    if result_class in UNPROCESSED:  # as a unit whose processing failed: its class and reason, nothing else
        empty = {name: frame.clear() for name, frame in fragments.items()}
        return empty | {"outcomes": pl.DataFrame([{"unit_id": uid, "flight_id": windows[0].flight_id,
                                                   "duration_s": duration, "result_class": result_class,
                                                   "reason": reason, "num_words": 0, "text": "",
                                                   "sha256": sha256} | {k: ordered[0][k] for k in CHANNEL_COLUMNS}],
                                                 schema=fragments["outcomes"].schema)}
    speakers = fragments["speakers"].filter(pl.col("unit_id").is_in(pieces))
    local = [(index[r["unit_id"]], r["speaker"], None if r["embedding"] is None else np.asarray(r["embedding"]),
              r["speech_s"]) for r in speakers.iter_rows(named=True)]
    solo = (set(speakers.filter(pl.col("segmentation") == "channel")["speaker"])  # one-party channels' speakers
            if ordered[0]["channel_reading"] == "by_channel" else None)
    voice, named = link_unit_speakers(local, threshold, hints, solo)

    def relabel(parts: list[pl.DataFrame]) -> pl.DataFrame:
        """Each window's local labels as the unit's voices (`v0`, `v1`, …)."""
        return pl.concat([part.with_columns(pl.col("speaker").replace_strict(
            {label: f"v{v}" for (w, label), v in voice.items() if w == i}, default=None, return_dtype=pl.String))
            for i, part in enumerate(parts)])

    turns = relabel(_on_unit_clock(fragments["turns"], uid, windows, unit_cores)).sort(
        "exclusive", "start_s", maintain_order=True)
    # voices named in the order they first speak, as pyannote names a unit's speakers
    first = (turns.filter(~pl.col("exclusive")).group_by("speaker", maintain_order=True).agg(pl.col("start_s").min())
             .sort("start_s"))
    names = {v: (named.get(int(v[1:])) if v else None) or f"SPEAKER_{i:02d}" for i, v in enumerate(first["speaker"])}
    turns = _rejoin(turns.with_columns(pl.col("speaker").replace_strict(names, default=None, return_dtype=pl.String)),
                    ["exclusive", "speaker"])
    regions = _rejoin(pl.concat(_on_unit_clock(fragments["regions"], uid, windows, unit_cores)), ["unit_id"])
    words = relabel(_on_unit_clock(fragments["words"], uid, windows, unit_cores, by_midpoint=True))
    words = words.with_columns(pl.col("speaker").replace_strict(names, default=None, return_dtype=pl.String))
    language = _unit_language(ordered)
    if result_class != ResultClass.TRANSCRIBED:  # silent or unsupported_language: no words
        words = words.clear()
    if cut_reason is not None:  # what decoded keeps its rows, as a whole unit's does
        result_class, reason = str(ResultClass.TRUNCATED), "; ".join(r for r in (cut_reason, reason) if r)[:500]
    elif ordered[-1]["result_class"] in (ResultClass.TRANSCRIBED, ResultClass.SILENT) and (
            note := (ordered[-1]["reason"] or "").removesuffix(SILENT_REASON).rstrip("; ")):
        reason = "; ".join(r for r in (reason, note) if r)[:500]  # how the stream's length differed from the listing
        if note.startswith("truncated:"):  # it ended well short of the listing inside its last window: a whole
            result_class = str(ResultClass.TRUNCATED)  # unit that did so is truncated too (its words kept)
    words = words.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("word_index"),
                               pl.Series("segment_index", segment_indices(words["speaker"].to_list()), dtype=pl.Int64))
    vad_rows = [r for p in pieces for r in fragments["vad_units"].filter(pl.col("unit_id") == p).iter_rows(named=True)]
    speech_s = float(regions["end_s"].sum() - regions["start_s"].sum()) if len(regions) else 0.0
    num_chunks, npy, (frames, local_speakers) = _stitched_scores(vad_rows, windows, unit_cores, read_array)
    return {
        "vad_units": pl.DataFrame([vad_rows[0] | {"unit_id": uid, "duration_s": duration, "speech_s": speech_s,
                                                  "num_regions": len(regions), "num_chunks": num_chunks,
                                                  "frames_per_chunk": frames, "local_speakers": local_speakers,
                                                  "scores_uri": write_scores(uid, npy)}],
                                  schema=fragments["vad_units"].schema),
        "regions": regions, "turns": turns, "words": words,
        "speakers": _voice_rows(uid, speakers, {m: names[f"v{v}"] for m, v in voice.items() if f"v{v}" in names}, index,
                                turns, fragments["speakers"].schema),
        "outcomes": pl.DataFrame([{"unit_id": uid, "flight_id": windows[0].flight_id, "duration_s": duration,
                                   "result_class": result_class, "reason": reason, "speech_s": speech_s,
                                   "num_speakers": len(names) if result_class != ResultClass.SILENT else 0,
                                   "num_words": len(words),
                                   "text": word_separator(language["language"]).join(words["word"]),
                                   "sha256": sha256} | language | {k: ordered[0][k] for k in CHANNEL_COLUMNS}],
                                 schema=fragments["outcomes"].schema),
    }


def _voice_rows(uid: str, speakers: pl.DataFrame, name_of: dict[tuple[int, str], str], index: dict[str, int],
                turns: pl.DataFrame, schema) -> pl.DataFrame:
    """The unit's speakers table: a row per voice, its speech from the stitched turns and its centroid the
    speech-weighted mean of its windows' centroids."""
    spoken = turns.filter(~pl.col("exclusive")).group_by("speaker").agg((pl.col("end_s") - pl.col("start_s")).sum())
    speech = dict(zip(spoken["speaker"], spoken["end_s"], strict=True))
    members: dict[str, list[dict]] = {}
    for r in speakers.iter_rows(named=True):
        name = name_of.get((index[r["unit_id"]], r["speaker"]))
        if name is not None:  # a local speaker with no turn left in any core has no voice
            members.setdefault(name, []).append(r)
    rows = []
    for name in sorted(members):
        group, embedded = members[name], [r for r in members[name] if r["embedding"] is not None]
        embedding = (np.average(np.array([r["embedding"] for r in embedded]), axis=0,
                                weights=[max(r["speech_s"], 1e-3) for r in embedded]).astype(np.float32)
                     if embedded else None)
        rows.append({"unit_id": uid, "speaker": name, "speech_s": speech.get(name, 0.0),
                     "embedding": None if embedding is None else embedding.tolist(),
                     "segmentation": group[0]["segmentation"], "embedding_path": group[0]["embedding_path"]})
    return pl.DataFrame(rows, schema=schema)


def _runs(frame: pl.DataFrame) -> Iterator[tuple[str, pl.DataFrame]]:
    """The frame's consecutive runs of rows of one `unit_id`, in order."""
    if frame.is_empty():
        return
    ids = frame["unit_id"]
    edges = [0, *np.flatnonzero(ids[1:].to_numpy() != ids[:-1].to_numpy()) + 1, len(frame)]
    for a, b in zip(edges, edges[1:], strict=False):
        yield ids[int(a)], frame.slice(int(a), int(b - a))
