"""Speaker-attributed transcripts as people read them: turns of `SPEAKER_xx [start-end]: words` (a unit read by channel:
its channels' speakers, the header saying so).

Built from the `transcripts` tables alone (Dagster-free), so the materialization metadata in the UI and
`batch-assets show` in a terminal print the same text. Consecutive words of one speaker form a turn;
texts are bounded for metadata, always cut between whole words, and say what was left out.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from batch_assets.gpu.outputs.tables import segment_indices
from batch_assets.models.languages import word_separator


@dataclasses.dataclass(frozen=True)
class Turn:
    speaker: str
    start_s: float
    end_s: float
    words: tuple[str, ...]
    separator: str = " "  # between two words (nothing in a language written without spaces)

    def line(self) -> str:
        return f"{self.speaker} [{self.start_s:.2f}-{self.end_s:.2f}]: {self.separator.join(self.words)}"


def turns(words: pl.DataFrame, language: str | None = None) -> list[Turn]:
    """One unit's words (word_index order) grouped into speaker turns: the `segments` of `gpu/outputs/tables.py`; the
    words of a `language` written without spaces joined with nothing."""
    separator = word_separator(language)
    found: list[Turn] = []
    segment, current, speaker, start, end = None, [], "", 0.0, 0.0
    if "segment_index" not in words.columns:  # a day written before segments: a turn per change of speaker
        words = words.sort("word_index")
        words = words.with_columns(pl.Series("segment_index", segment_indices(words["speaker"].to_list()),
                                             dtype=pl.Int64))
    for row in words.sort("word_index").iter_rows(named=True):
        if current and row["segment_index"] != segment:
            found.append(Turn(speaker, start, end, tuple(current), separator))
            current = []
        if not current:
            segment, speaker, start = row["segment_index"], row["speaker"] or "SPEAKER_?", row["start_s"]
        current.append(row["word"])
        end = row["end_s"]
    if current:
        found.append(Turn(speaker, start, end, tuple(current), separator))
    return found


def _bounded(lines: list[str], max_chars: int) -> list[str]:
    """As many whole lines as fit; the line that does not fit is cut after its last whole word that does."""
    kept, used = [], 0
    for i, line in enumerate(lines):
        if used + len(line) <= max_chars:
            kept.append(line)
            used += len(line) + 1
            continue
        cut = line[: max(0, max_chars - used)].rsplit(" ", 1)[0]
        if "]: " in cut:  # at least the turn's label and one whole word
            kept.append(cut + " …")
        kept.append(f"… ({len(lines) - i} more turn(s) not shown)")
        break
    return kept


def unit_lines(unit: dict, words: pl.DataFrame, max_chars: int = 2000) -> list[str]:
    """A unit's header line and its turns (bounded)."""
    duration = f"{unit['duration_s']:.1f} s" if unit["duration_s"] is not None else "-"
    language = unit.get("language")
    by_channel = f"{unit['channels']} channels read by channel, " if unit.get("channel_reading") == "by_channel" else ""
    header = (f"{unit['unit_id']} ({unit['result_class']}, {language + ', ' if language else ''}{duration}, "
              f"{by_channel}{unit['num_words']} words)")
    if unit["reason"]:
        header += f": {unit['reason']}"
    return [header, *_bounded([t.line() for t in turns(words, language)], max_chars)]


def partition_units(units: pl.DataFrame, words: pl.DataFrame, unit: str | None = None,
                    max_chars_per_unit: int = 2000) -> list[list[str]]:
    """Every unit (or one, by unit_id or source key), each as its header and speaker turns."""
    rows = [r for r in units.iter_rows(named=True)
            if unit is None or unit == r["unit_id"] or r["source_uri"].endswith("/" + unit)]
    if unit is not None and not rows:
        raise KeyError(f"unit {unit!r} is not in this partition; its units: {', '.join(units['unit_id'])}")
    by_unit = ({key[0]: frame for key, frame in words.partition_by("unit_id", as_dict=True).items()}
               if len(words) else {})
    return [unit_lines(row, by_unit.get(row["unit_id"], words.clear()), max_chars_per_unit) for row in rows]


def markdown(units: pl.DataFrame, words: pl.DataFrame, max_chars_per_unit: int = 1500, max_units: int = 20) -> str:
    """The speaker-attributed transcript for the UI: per unit a bold header and its turns in a code block."""
    blocks = partition_units(units, words, None, max_chars_per_unit)
    out = []
    for header, *body in blocks[:max_units]:
        out.append(f"**{header}**")
        if body:
            out.append("```\n" + "\n".join(body) + "\n```")
    if len(blocks) > max_units:
        out.append(f"… {len(blocks) - max_units} more unit(s): `batch-assets show --partition P --unit U` prints "
                   "any of them")
    return "\n\n".join(out)
