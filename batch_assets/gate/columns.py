"""Every published column of the GPU assets' tables, two runs side by side: decisions must be identical,
continuous values within a bound.

The word-level gate (`compare.py`) asks whether a candidate is as good as its baseline; this asks whether it is
the same, column by column, which is what the exact levers promise. A column is one of three kinds:

- **continuous** (`CONTINUOUS`): a float a model computes, whose last bits can move with the batch a forward
  ran in (another GEMM blocking, another convolution algorithm): the words' `score`, the speakers'
  `embedding`, the units' `language_confidence` and the VAD score arrays (`vad_scores/units.scores_uri`'s
  contents). The largest absolute
  difference is reported and held to the column's bound (docs/gpu-section.md, "Exactness, column by column").
- **provenance** (`PROVENANCE`): says how or where a row was made, not what it found (`segmentation`:
  reused or computed; `embedding_path`; the URIs, which name each run's own files): not compared.
- **decision**: every other column (words, times, speakers, turns, classes, reasons, counts, texts, hints, the
  language, where it came from and the ASR model it was routed to):
  compared for equality, row by row, the rows of both runs in the order of the table's key (`KEYS`).

A NaN on one side only, a value on one side only, or another shape is a decision change, not a difference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl

# (asset, table) of the three GPU assets, in the order the report lists them
TABLES = (("transcripts", "units"), ("transcripts", "segments"), ("transcripts", "words"), ("diarization", "turns"),
          ("diarization", "speakers"), ("vad_scores", "units"), ("vad_scores", "regions"))
# the rows' order for the comparison: a table's own order follows the flight plan, which a partial rerun changes
KEYS = {"units": ("unit_id",), "segments": ("unit_id", "segment_index"), "words": ("unit_id", "word_index"),
        "turns": ("unit_id", "exclusive", "start_s", "end_s", "speaker"), "speakers": ("unit_id", "speaker"),
        "regions": ("unit_id", "start_s", "end_s")}
PROVENANCE = frozenset({"source_uri", "scores_uri", "segmentation", "embedding_path"})
SHOWN = 20  # changes listed in a report (all are counted)
SCORE, EMBEDDING, VAD_SCORES = "transcripts/words.score", "diarization/speakers.embedding", "vad_scores/units.scores"
LANGUAGE_CONFIDENCE = "transcripts/units.language_confidence"
# the bound each continuous column is held to where results must not change (the levers): far above the last-bit
# differences measured (docs/gpu-section.md), far below anything an analyst could act on
CONTINUOUS = {SCORE: 1e-4, EMBEDDING: 1e-4, LANGUAGE_CONFIDENCE: 1e-4, VAD_SCORES: 1e-4}
_COLUMN_OF = {("transcripts", "words", "score"): SCORE, ("diarization", "speakers", "embedding"): EMBEDDING,
              ("transcripts", "units", "language_confidence"): LANGUAGE_CONFIDENCE}


@dataclasses.dataclass
class ColumnComparison:
    """What differs between two runs' published tables. `largest`: each continuous column's largest absolute
    difference over the rows both runs have (0.0 where nothing was compared); `changed`: each decision column
    (or table) that differs, with the partition and the first differing row."""

    changed: list[str] = dataclasses.field(default_factory=list)
    largest: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(CONTINUOUS, 0.0))

    def bars(self) -> list[tuple[str, str, str, bool]]:
        """The exact levers' bars: no decision column changed, each continuous column within its bound."""
        return [("decision columns changed", str(len(self.changed)), "== 0", not self.changed)] + [
            (f"{column} max |diff|", f"{self.largest[column]:.2e}", f"<= {bound:.0e}", self.largest[column] <= bound)
            for column, bound in CONTINUOUS.items()]

    def as_dict(self) -> dict:
        """For JSON and asset-check metadata: the first `SHOWN` changes and their count."""
        return {"changed_columns": self.changed[:SHOWN], "changed_columns_count": len(self.changed),
                "largest_difference": dict(self.largest)}

    def _continuous(self, column: str, difference: float) -> None:
        self.largest[column] = max(self.largest[column], difference)


def compare_columns(result: ColumnComparison, baseline, candidate, partition: str, arrays: bool = True) -> None:
    """Add `partition`'s differences between two storages' published tables to `result`; `arrays`: the VAD score
    arrays too (one read per unit and run)."""
    for asset, name in TABLES:
        where = f"{asset}/{name} ({partition})"
        try:
            a, b = baseline.read_parquet(asset, partition, name), candidate.read_parquet(asset, partition, name)
        except FileNotFoundError as error:
            result.changed.append(f"{where}: {error}")
            continue
        keys = [k for k in KEYS.get(name, ()) if k in a.columns and k in b.columns]
        a, b = (a.sort(keys, maintain_order=True), b.sort(keys, maintain_order=True)) if keys else (a, b)
        if a.columns != b.columns or a.height != b.height:
            result.changed.append(f"{where}: columns {a.columns} and {a.height} rows -> "
                                  f"{b.columns} and {b.height} rows")
            continue
        for column in a.columns:
            if column in PROVENANCE:
                continue
            continuous = _COLUMN_OF.get((asset, name, column))
            problem = (_continuous_difference(result, continuous, a[column], b[column]) if continuous
                       else _first_difference(a[column], b[column]))
            if problem:
                result.changed.append(f"{asset}/{name}.{column} ({partition}): {problem}")
        if arrays and (asset, name) == ("vad_scores", "units"):
            _compare_vad_scores(result, baseline, candidate, a, b, partition)


def _first_difference(a: pl.Series, b: pl.Series) -> str:
    if a.dtype != b.dtype:
        return f"type {a.dtype} -> {b.dtype}"
    same = (a == b) | (a.is_null() & b.is_null())
    differing = (~same.fill_null(False)).arg_true()
    if differing.is_empty():
        return ""
    row = int(differing[0])
    return f"{len(differing)} rows differ, first row {row}: {_short(a[row])} -> {_short(b[row])}"


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _continuous_difference(result: ColumnComparison, column: str, a: pl.Series, b: pl.Series) -> str:
    """Records the largest difference; a decision problem (a value on one side only, another length) is returned."""
    for row, (x, y) in enumerate(zip(a.to_list(), b.to_list(), strict=True)):
        if (x is None) != (y is None):
            return f"row {row}: {x!r} -> {y!r}"
        if x is None:
            continue
        problem = _array_difference(result, column, np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        if problem:
            return f"row {row}: {problem}"
    return ""


def _array_difference(result: ColumnComparison, column: str, x: np.ndarray, y: np.ndarray) -> str:
    """Records the largest difference of two arrays; another shape, or NaN (a null) on one side only, is returned."""
    if x.shape != y.shape:
        return f"shape {x.shape} -> {y.shape}"
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    if (nan_x != nan_y).any():
        return f"NaN on one side at {int(np.argmax(nan_x != nan_y))}"
    if x.size and not nan_x.all():
        result._continuous(column, float(np.max(np.abs(x[~nan_x] - y[~nan_y]))))
    return ""


def _compare_vad_scores(result: ColumnComparison, baseline, candidate, a: pl.DataFrame, b: pl.DataFrame,
                        partition: str) -> None:
    for unit_id, uri_a, uri_b in zip(a["unit_id"], a["scores_uri"], b["scores_uri"], strict=True):
        if not uri_a or not uri_b:
            if bool(uri_a) != bool(uri_b):
                result.changed.append(f"{VAD_SCORES} ({partition}) {unit_id}: {uri_a!r} -> {uri_b!r}")
            continue
        try:
            x, y = baseline.read_array(uri_a), candidate.read_array(uri_b)
        except Exception as error:  # gone, unreadable, not an array; on Python 3.12 a damaged header raises
            # tokenize.TokenError, not ValueError: whatever the exception, the array is a change
            result.changed.append(f"{VAD_SCORES} ({partition}) {unit_id}: {type(error).__name__}: {error}"[:300])
            continue
        problem = _array_difference(result, VAD_SCORES, x.astype(np.float64), y.astype(np.float64))
        if problem:
            result.changed.append(f"{VAD_SCORES} ({partition}) {unit_id}: {problem}")
