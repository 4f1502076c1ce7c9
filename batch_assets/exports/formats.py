"""A unit's transcript as files other tools read: SRT and WebVTT subtitles, plain text, WhisperX JSON and RTTM.

Built from the `transcripts` tables alone (Dagster-free), so the export asset and the CLI command that exports in a
terminal write the same bytes. Subtitle cues are made from words, not turns: a long turn is cut into cues at
word boundaries (never longer than `max_cue_s`, never more than two lines of `max_line_chars`), and a cue never
mixes two speakers (cut at every segment, i.e. speaker turn). RTTM is the diarization with overlaps, as
pyannote writes it. A unit without words gives valid empty files (SRT and RTTM empty, VTT its header alone).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable

import polars as pl

from batch_assets.models.languages import word_separator

FORMATS = ("srt", "vtt", "txt", "json", "rttm")
UNKNOWN_SPEAKER = "SPEAKER_?"


@dataclasses.dataclass(frozen=True)
class Cue:
    """Consecutive words of one speaker shown together; times are its first word's start and its words' last end."""

    start_s: float
    end_s: float
    speaker: str | None
    words: tuple[str, ...]
    separator: str = " "  # between two words: nothing in a language written without spaces (Japanese)

    def lines(self, max_line_chars: int, prefixed: bool) -> list[str]:
        """The words wrapped (as SRT shows them when `prefixed`: the speaker's `[label]` first, then a space)."""
        label = [f"[{self.speaker}]"] if prefixed and self.speaker else []
        return wrap([*label, *self.words], max_line_chars, [" "] * len(label) + [self.separator] * len(self.words))


def wrap(tokens: Iterable[str], max_line_chars: int, separators: list[str] | None = None) -> list[str]:
    """Tokens greedily filled into lines of at most `max_line_chars`; a longer token stays whole on its own line.
    `separators[i]`: what joins token i to the one after it on a line (a space each unless given)."""
    lines: list[str] = []
    tokens = list(tokens)
    separators = separators or [" "] * len(tokens)
    for i, token in enumerate(tokens):
        joint = separators[i - 1] if i else ""
        if lines and len(lines[-1]) + len(joint) + len(token) <= max_line_chars:
            lines[-1] += joint + token
        else:
            lines.append(token)
    return lines


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _clock(seconds: float, separator: str) -> str:
    """`HH:MM:SS<separator>mmm` (hours grow past 99 rather than wrap)."""
    ms = max(0, _ms(seconds))
    return f"{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}{separator}{ms % 1000:03d}"


def _clock_tenths(seconds: float) -> str:
    """`HH:MM:SS.d`, cut (not rounded) to the tenth, so the time shown is never after the words start."""
    tenths = max(0, _ms(seconds)) // 100
    return f"{tenths // 36_000:02d}:{tenths // 600 % 60:02d}:{tenths // 10 % 60:02d}.{tenths % 10}"


def _one_line(text: str | None) -> str:
    """Whitespace (newlines included) collapsed, so no word or text can break a cue or line apart."""
    return " ".join((text or "").split())


def _check_one_unit(*frames: pl.DataFrame) -> None:
    ids = {u for frame in frames if len(frame) and "unit_id" in frame.columns for u in frame["unit_id"].unique()}
    if len(ids) > 1:
        raise ValueError(f"exports are per unit; these rows hold {len(ids)} units ({', '.join(sorted(map(str, ids)))})")


def _words_in_order(words: pl.DataFrame) -> pl.DataFrame:
    return words.sort("segment_index", "word_index") if len(words) else words


def _segment_speakers(segments: pl.DataFrame) -> dict[int, str | None]:
    if not len(segments):
        return {}
    return dict(zip(segments["segment_index"], (speaker or None for speaker in segments["speaker"]), strict=True))


def cues(segments: pl.DataFrame, words: pl.DataFrame, max_line_chars: int = 42, max_cue_s: float = 7.0,
         language: str | None = None) -> list[Cue]:
    """One unit's words as subtitle cues, cut at every segment (speaker turn) and before a word that would make the
    cue longer than `max_cue_s` or its SRT text (speaker label included) more than two lines; at least one word each.
    The words of a `language` written without spaces are joined with nothing."""
    _check_one_unit(segments, words)
    speakers = _segment_speakers(segments)
    limit_ms, separator = _ms(max_cue_s), word_separator(language)
    found: list[Cue] = []
    current: list[dict] = []
    for row in _words_in_order(words).iter_rows(named=True):
        word = _one_line(row["word"])
        if not word:
            continue
        row = row | {"word": word, "speaker": speakers.get(row["segment_index"]) or row["speaker"] or None}
        if current and (_turn(row) != _turn(current[0]) or _longer(current, row, limit_ms)
                        or _taller(current, row, max_line_chars, separator)):
            found.append(_cue(current, separator))
            current = []
        current.append(row)
    if current:
        found.append(_cue(current, separator))
    return found


def _turn(row: dict) -> tuple:
    return row["segment_index"], row["speaker"]


def _cue(rows: list[dict], separator: str = " ") -> Cue:
    return Cue(rows[0]["start_s"], max(r["end_s"] for r in rows), rows[0]["speaker"], tuple(r["word"] for r in rows),
               separator)


def _longer(rows: list[dict], row: dict, limit_ms: int) -> bool:
    return _ms(max(row["end_s"], *(r["end_s"] for r in rows))) - _ms(rows[0]["start_s"]) > limit_ms


def _taller(rows: list[dict], row: dict, max_line_chars: int, separator: str) -> bool:
    return len(_cue([*rows, row], separator).lines(max_line_chars, True)) > 2


def srt(segments: pl.DataFrame, words: pl.DataFrame, max_line_chars: int = 42, max_cue_s: float = 7.0,
        language: str | None = None) -> str:
    """SubRip: cues numbered from 1, `HH:MM:SS,mmm` times, the text led by `[SPEAKER_xx]`, each cue ending in a blank
    line (as `srt.compose` writes them); empty without words."""
    blocks = [f"{n}\n{_clock(c.start_s, ',')} --> {_clock(c.end_s, ',')}\n" + "\n".join(c.lines(max_line_chars, True))
              + "\n\n" for n, c in enumerate(cues(segments, words, max_line_chars, max_cue_s, language), start=1)]
    return "".join(blocks)


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def vtt(segments: pl.DataFrame, words: pl.DataFrame, max_line_chars: int = 42, max_cue_s: float = 7.0,
        language: str | None = None) -> str:
    """WebVTT: the same cues as `srt`, `HH:MM:SS.mmm` times, the speaker as a voice span (`<v SPEAKER_xx>text`), the
    unit's language as a `Language:` header line when it is known.

    Lines are wrapped without the label (players do not show a voice), `&`, `<` and `>` written as entities."""
    blocks = ["WEBVTT\n" + (f"Language: {language}\n" if language else "")]
    for c in cues(segments, words, max_line_chars, max_cue_s, language):
        text = "\n".join(_vtt_escape(line) for line in c.lines(max_line_chars, False))
        voice = f"<v {_vtt_escape(c.speaker)}>" if c.speaker else ""
        blocks.append(f"{_clock(c.start_s, '.')} --> {_clock(c.end_s, '.')}\n{voice}{text}\n")
    return "\n".join(blocks)


def txt(segments: pl.DataFrame) -> str:
    """One line per segment: `[SPEAKER_xx HH:MM:SS.d]: text` (the segment's start; no speaker: `SPEAKER_?`)."""
    _check_one_unit(segments)
    if not len(segments):
        return ""
    rows = segments.sort("segment_index").iter_rows(named=True)
    return "".join(f"[{row['speaker'] or UNKNOWN_SPEAKER} {_clock_tenths(row['start_s'])}]: {_one_line(row['text'])}\n"
                   for row in rows)


def _present(value: float | None) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _whisperx_word(row: dict) -> dict:
    """A word as WhisperX writes it; `score` and `speaker` left out when unknown (as WhisperX does)."""
    word: dict = {"word": row["word"], "start": row["start_s"], "end": row["end_s"]}
    if _present(row.get("score")):
        word["score"] = row["score"]
    if row.get("speaker"):
        word["speaker"] = row["speaker"]
    return word


def whisperx_json(segments: pl.DataFrame, words: pl.DataFrame, language: str | None = None) -> dict:
    """WhisperX's result shape: `segments` (each with its `words`), `word_segments` (all words) and `language`."""
    _check_one_unit(segments, words)
    by_segment: dict[int, list[dict]] = {}
    flat = []
    for row in _words_in_order(words).iter_rows(named=True):
        word = _whisperx_word(row)
        by_segment.setdefault(row["segment_index"], []).append(word)
        flat.append(word)
    out_segments = []
    for row in (segments.sort("segment_index").iter_rows(named=True) if len(segments) else ()):
        segment: dict = {"start": row["start_s"], "end": row["end_s"], "text": row["text"]}
        if row["speaker"]:
            segment["speaker"] = row["speaker"]
        out_segments.append(segment | {"words": by_segment.get(row["segment_index"], [])})
    return {"segments": out_segments, "word_segments": flat, "language": language}


def json_text(segments: pl.DataFrame, words: pl.DataFrame, language: str | None = None) -> str:
    """`whisperx_json` as JSON text (UTF-8 kept, as WhisperX writes it; NaN refused so the file is strict JSON)."""
    return json.dumps(whisperx_json(segments, words, language), ensure_ascii=False, allow_nan=False) + "\n"


def rttm(turns: pl.DataFrame, unit_id: str) -> str:
    """The unit's diarization with overlaps (`exclusive` false) as RTTM `SPEAKER` lines, sorted by start; the
    channel field is the turn's channel counted from 1 (RTTM's numbering: a unit read by channel), else 1.

    The duration is whole milliseconds (end minus start in ms), so start + duration reads back as the end to 1 ms."""
    if not len(turns):
        return ""
    rows = _unit_rows(turns, unit_id).filter(~pl.col("exclusive")).sort("start_s", "end_s", "speaker")
    lines = []
    for row in rows.iter_rows(named=True):
        start, end = _ms(row["start_s"]), _ms(row["end_s"])
        channel = 1 if row.get("channel") is None else row["channel"] + 1
        lines.append(f"SPEAKER {unit_id} {channel} {start / 1000:.3f} {(end - start) / 1000:.3f} <NA> <NA> "
                     f"{row['speaker'] or UNKNOWN_SPEAKER} <NA> <NA>\n")
    return "".join(lines)


def _unit_rows(frame: pl.DataFrame, unit_id: str) -> pl.DataFrame:
    return frame.filter(pl.col("unit_id") == unit_id) if len(frame) and "unit_id" in frame.columns else frame


def check_formats(formats: Iterable[str] | str) -> tuple[str, ...]:
    """The formats asked (a single name or several), each one of `FORMATS`, else ValueError naming it."""
    asked = (formats,) if isinstance(formats, str) else tuple(formats)
    for name in asked:
        if name not in FORMATS:
            raise ValueError(f"unknown export format {name!r}; the formats: {', '.join(FORMATS)}")
    return tuple(dict.fromkeys(asked))


def unit_files(unit_id: str, segments: pl.DataFrame, words: pl.DataFrame, turns: pl.DataFrame,
               formats: Iterable[str] | str = FORMATS, *, max_line_chars: int = 42,
               max_cue_s: float = 7.0, language: str | None = None) -> dict[str, str]:
    """`{"{unit_id}.{format}": text}` for the formats asked; the frames may hold the whole partition (filtered here).
    `language`: the unit's (`transcripts/units.language`): the JSON's `language`, WebVTT's `Language:` header, and
    how words are joined."""
    asked = check_formats(formats)
    segments, words, turns = (_unit_rows(frame, unit_id) for frame in (segments, words, turns))
    make = {
        "srt": lambda: srt(segments, words, max_line_chars, max_cue_s, language),
        "vtt": lambda: vtt(segments, words, max_line_chars, max_cue_s, language),
        "txt": lambda: txt(segments),
        "json": lambda: json_text(segments, words, language),
        "rttm": lambda: rttm(turns, unit_id),
    }
    return {f"{unit_id}.{name}": make[name]() for name in asked}


EXPORTED_CLASSES = ("transcribed", "truncated", "silent")


def exported_units(units: pl.DataFrame) -> list[str]:
    """The units that get files: those with a transcript (a silent one's files are empty; a failed one has none)."""
    return units.filter(pl.col("result_class").is_in(EXPORTED_CLASSES))["unit_id"].to_list()


def partition_files(units: pl.DataFrame, segments: pl.DataFrame, words: pl.DataFrame, turns: pl.DataFrame,
                    formats: Iterable[str] | str = FORMATS, unit: str | None = None) -> dict[str, str]:
    """Every exported unit's files (or one unit's, by unit_id or its key under the partition folder); a unit
    that is not in the partition, or has no transcript, is a KeyError saying which and why."""
    asked = check_formats(formats)
    chosen = exported_units(units)
    if unit is not None:
        rows = units.filter((pl.col("unit_id") == unit) | pl.col("source_uri").str.ends_with("/" + unit))
        if not len(rows):
            raise KeyError(f"unit {unit!r} is not in this partition; its units: {', '.join(units['unit_id'])}")
        row = rows.row(0, named=True)
        if row["unit_id"] not in chosen:
            raise KeyError(f"unit {row['unit_id']!r} has no transcript to export: "
                           f"{row['result_class']} ({row['reason']})")
        chosen = [row["unit_id"]]
    by_unit = {name: {key[0]: part for key, part in frame.partition_by("unit_id", as_dict=True).items()}
               if len(frame) else {} for name, frame in (("segments", segments), ("words", words), ("turns", turns))}
    files: dict[str, str] = {}
    languages = dict(zip(units["unit_id"], units["language"], strict=True)) if "language" in units.columns else {}
    for uid in chosen:
        parts = [by_unit[name].get(uid, frame.clear())
                 for name, frame in (("segments", segments), ("words", words), ("turns", turns))]
        files |= unit_files(uid, *parts, asked, language=languages.get(uid))
    return files
