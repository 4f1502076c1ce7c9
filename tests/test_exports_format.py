"""The export files read back by independent parsers: `srt`, `webvtt-py`, `json` and pyannote's RTTM loader.

Small frames made by hand (no Dagster, no models): two speakers, a turn too long for one cue, a word longer than a
line, a word longer than a cue, a null score, a null speaker, markup characters, an hour-long offset, and a unit
with no words. Each parsed cue must give back its words' times to the ms, its words, its speaker, and its bounds.
"""

from __future__ import annotations

import datetime
import html
import io
import json
import re

import polars as pl
import pytest
import srt as srt_parser
import webvtt
from pyannote.database.util import load_rttm

from batch_assets.exports import formats as exports

MAX_LINE, MAX_CUE_S = 42, 7.0
LONG_WORD = "pneumonoultramicroscopicsilicovolcanoconiosis"  # 45 characters, more than a line
WORDS_SCHEMA = {"unit_id": pl.String, "segment_index": pl.Int64, "word_index": pl.Int64, "start_s": pl.Float64,
                "end_s": pl.Float64, "word": pl.String, "speaker": pl.String, "score": pl.Float64}
SEGMENTS_SCHEMA = {"unit_id": pl.String, "segment_index": pl.Int64, "speaker": pl.String, "start_s": pl.Float64,
                   "end_s": pl.Float64, "text": pl.String, "num_words": pl.Int64}
TURNS_SCHEMA = {"unit_id": pl.String, "start_s": pl.Float64, "end_s": pl.Float64, "speaker": pl.String,
                "exclusive": pl.Boolean}


def _words() -> pl.DataFrame:
    rows = [("u1", 0, "SPEAKER_00", 0.5, 0.9, "hello", 0.91), ("u1", 0, "SPEAKER_00", 1.0, 1.4, "there", None)]
    long_turn = [f"word{i}" for i in range(30)]
    long_turn[5], long_turn[12] = "AT&T", LONG_WORD
    long_turn[20] = "<unk>"
    rows += [("u1", 1, "SPEAKER_01", round(2.0 + 0.5 * i, 3), round(2.4 + 0.5 * i, 3), w, 0.8)
             for i, w in enumerate(long_turn)]
    rows += [("u1", 2, None, 18.0, 26.5, "ummmm", 0.2)]  # a single word longer than a cue may be
    rows += [("u1", 3, "SPEAKER_00", 27.0, 27.3, "bye", 0.99), ("u3", 0, "SPEAKER_00", 3725.123, 3726.0, "late", 0.5)]
    return pl.DataFrame(
        [{"unit_id": u, "segment_index": s, "word_index": i, "start_s": a, "end_s": b, "word": w, "speaker": spk,
          "score": c} for i, (u, s, spk, a, b, w, c) in enumerate(rows)], schema=WORDS_SCHEMA,
    ).with_columns(pl.col("word_index") - pl.col("word_index").min().over("unit_id"))


def _segments(words: pl.DataFrame) -> pl.DataFrame:
    return (words.group_by("unit_id", "segment_index", maintain_order=True)
            .agg(pl.col("speaker").first(), pl.col("start_s").min(), pl.col("end_s").max(),
                 pl.col("word").str.join(" ").alias("text"), pl.len().cast(pl.Int64).alias("num_words"))
            .select(list(SEGMENTS_SCHEMA)))


def _turns() -> pl.DataFrame:
    rows = [("u1", 16.5, 17.5, "SPEAKER_00", False), ("u1", 0.4, 1.5, "SPEAKER_00", False),
            ("u1", 1.9, 17.1, "SPEAKER_01", False), ("u1", 26.9, 27.4, "SPEAKER_00", False),
            ("u1", 0.4, 1.5, "SPEAKER_00", True), ("u1", 1.9, 16.5, "SPEAKER_01", True),
            ("u3", 3725.0, 3726.1, "SPEAKER_00", False)]
    return pl.DataFrame([dict(zip(TURNS_SCHEMA, r, strict=True)) for r in rows], schema=TURNS_SCHEMA)


WORDS = _words()
SEGMENTS = _segments(WORDS)
TURNS = _turns()
U1_WORDS, U1_SEGMENTS = WORDS.filter(pl.col("unit_id") == "u1"), SEGMENTS.filter(pl.col("unit_id") == "u1")


def _ms(value: datetime.timedelta | float) -> int:
    seconds = value.total_seconds() if isinstance(value, datetime.timedelta) else value
    return round(seconds * 1000)


def _srt_cues(text: str) -> list[tuple[int, int, str | None, list[str]]]:
    """(start ms, end ms, speaker, display lines without the speaker label) per cue, numbered from 1."""
    found = []
    for n, sub in enumerate(srt_parser.parse(text), start=1):
        assert sub.index == n
        label = re.match(r"\[(\S+)\](?: |\n|$)", sub.content)
        body = sub.content[label.end():] if label else sub.content
        assert all(len(line) <= MAX_LINE or " " not in line for line in sub.content.split("\n"))
        assert len(sub.content.split("\n")) <= 2
        speaker = label.group(1) if label else None
        found.append((_ms(sub.start), _ms(sub.end), speaker, body.split("\n") if body else []))
    return found


def _vtt_cues(text: str) -> list[tuple[int, int, str | None, list[str]]]:
    found = []
    for caption in webvtt.from_buffer(io.StringIO(text)).captions:
        lines = [html.unescape(line) for line in caption.text.split("\n")]  # webvtt-py strips tags, keeps entities
        assert all(len(line) <= MAX_LINE or " " not in line for line in lines) and len(lines) <= 2
        found.append((caption.start_time.in_milliseconds(), caption.end_time.in_milliseconds(), caption.voice, lines))
    return found


def _check_against_words(parsed: list[tuple[int, int, str | None, list[str]]], words: pl.DataFrame) -> None:
    """Every cue gives back the next words (in order, one segment), their first start and last end, their speaker."""
    rows = list(words.sort("segment_index", "word_index").iter_rows(named=True))
    at = 0
    for start, end, speaker, lines in parsed:
        tokens = " ".join(lines).split()
        taken, at = rows[at:at + len(tokens)], at + len(tokens)
        assert tokens == [r["word"] for r in taken]
        assert len({r["segment_index"] for r in taken}) == 1
        assert speaker == taken[0]["speaker"]
        assert (start, end) == (_ms(taken[0]["start_s"]), max(_ms(r["end_s"]) for r in taken))
    assert at == len(rows)


def test_srt_reads_back_as_the_words_with_speakers_and_bounds():
    text = exports.srt(U1_SEGMENTS, U1_WORDS, MAX_LINE, MAX_CUE_S)
    parsed = _srt_cues(text)
    _check_against_words(parsed, U1_WORDS)
    assert srt_parser.compose(srt_parser.parse(text)) == text  # as the srt package itself writes it
    assert text.startswith("1\n00:00:00,500 --> 00:00:01,400\n[SPEAKER_00] hello there\n\n2\n")
    assert sum(1 for _, _, speaker, _ in parsed if speaker == "SPEAKER_01") >= 3  # the long turn was cut
    assert [LONG_WORD] in [lines[-1:] for _, _, _, lines in parsed]  # whole, on its own line
    null_speaker = [cue for cue in parsed if cue[3] == ["ummmm"]]
    assert null_speaker and null_speaker[0][2] is None and "\nummmm\n\n" in text  # no prefix


def test_vtt_reads_back_as_the_same_cues_with_voices():
    text = exports.vtt(U1_SEGMENTS, U1_WORDS, MAX_LINE, MAX_CUE_S)
    assert text.startswith("WEBVTT\n\n00:00:00.500 --> 00:00:01.400\n<v SPEAKER_00>hello there\n")
    assert "AT&amp;T" in text and "&lt;unk&gt;" in text and "<unk>" not in text
    parsed = _vtt_cues(text)
    _check_against_words(parsed, U1_WORDS)
    srt_parsed = _srt_cues(exports.srt(U1_SEGMENTS, U1_WORDS, MAX_LINE, MAX_CUE_S))
    assert [(a, b, s, " ".join(lines)) for a, b, s, lines in parsed] == [
        (a, b, s, " ".join(lines)) for a, b, s, lines in srt_parsed]


@pytest.mark.parametrize("max_cue_s", [MAX_CUE_S, 2.0])
def test_cues_are_no_longer_than_max_cue_s_unless_one_word_is(max_cue_s):
    for parse, render in ((_srt_cues, exports.srt), (_vtt_cues, exports.vtt)):
        parsed = parse(render(U1_SEGMENTS, U1_WORDS, MAX_LINE, max_cue_s))
        _check_against_words(parsed, U1_WORDS)
        for start, end, _, lines in parsed:
            assert end - start <= max_cue_s * 1000 or len(" ".join(lines).split()) == 1
        assert any(end - start > max_cue_s * 1000 for start, end, _, _ in parsed)  # "ummmm" alone, 8.5 s


def test_hours_and_a_word_wider_than_a_line_after_the_label():
    words, segments = WORDS.filter(pl.col("unit_id") == "u3"), SEGMENTS.filter(pl.col("unit_id") == "u3")
    assert exports.srt(segments, words) == "1\n01:02:05,123 --> 01:02:06,000\n[SPEAKER_00] late\n\n"
    wide = words.with_columns(pl.lit(LONG_WORD).alias("word"))
    assert exports.srt(segments, wide).endswith(f"\n[SPEAKER_00]\n{LONG_WORD}\n\n")  # label and word: two lines
    assert exports.vtt(segments, wide).endswith(f"\n<v SPEAKER_00>{LONG_WORD}\n")


def test_txt_one_line_per_segment():
    lines = exports.txt(U1_SEGMENTS).splitlines()
    assert lines[0] == "[SPEAKER_00 00:00:00.5]: hello there"
    assert lines[2] == "[SPEAKER_? 00:00:18.0]: ummmm" and lines[3] == "[SPEAKER_00 00:00:27.0]: bye"
    assert len(lines) == len(U1_SEGMENTS)
    assert all(re.fullmatch(r"\[SPEAKER_\S+ \d\d:\d\d:\d\d\.\d\]: .+", line) for line in lines)
    assert exports.txt(SEGMENTS.filter(pl.col("unit_id") == "u3")) == "[SPEAKER_00 01:02:05.1]: late\n"


def test_json_has_whisperx_shape():
    result = json.loads(exports.json_text(U1_SEGMENTS, U1_WORDS, "en"))
    assert set(result) == {"segments", "word_segments", "language"} and result["language"] == "en"
    assert len(result["segments"]) == len(U1_SEGMENTS) and len(result["word_segments"]) == len(U1_WORDS)
    first = result["segments"][0]
    assert first == {"start": 0.5, "end": 1.4, "text": "hello there", "speaker": "SPEAKER_00", "words": [
        {"word": "hello", "start": 0.5, "end": 0.9, "score": 0.91, "speaker": "SPEAKER_00"},
        {"word": "there", "start": 1.0, "end": 1.4, "speaker": "SPEAKER_00"}]}  # null score: no key
    assert "speaker" not in result["segments"][2] and "speaker" not in result["segments"][2]["words"][0]
    assert [w for s in result["segments"] for w in s["words"]] == result["word_segments"]
    assert [w["word"] for w in result["word_segments"]] == U1_WORDS["word"].to_list()


def test_rttm_reads_back_with_pyannote(tmp_path):
    text = exports.rttm(TURNS, "u1")
    starts = [float(line.split()[3]) for line in text.splitlines()]
    assert starts == sorted(starts)
    path = tmp_path / "u1.rttm"
    path.write_text(text)
    loaded = load_rttm(str(path))
    assert set(loaded) == {"u1"}
    annotation = loaded["u1"]
    assert annotation.uri == "u1" and set(annotation.labels()) == {"SPEAKER_00", "SPEAKER_01"}
    got = sorted((_ms(seg.start), _ms(seg.end), label) for seg, _, label in annotation.itertracks(yield_label=True))
    expected = TURNS.filter((pl.col("unit_id") == "u1") & ~pl.col("exclusive"))
    assert got == sorted((_ms(r["start_s"]), _ms(r["end_s"]), r["speaker"]) for r in expected.iter_rows(named=True))


def test_unit_files_for_a_partition_and_a_unit_without_words(tmp_path):
    empty_words, empty_segments = WORDS.clear(), SEGMENTS.clear()
    for words, segments in ((WORDS, SEGMENTS), (empty_words, empty_segments)):  # u2 is in neither
        files = exports.unit_files("u2", segments, words, TURNS.filter(pl.col("unit_id") != "u2"))
        assert list(files) == [f"u2.{name}" for name in exports.FORMATS]
        assert files["u2.srt"] == "" and list(srt_parser.parse(files["u2.srt"])) == []
        assert files["u2.vtt"] == "WEBVTT\n" and webvtt.from_string(files["u2.vtt"]).captions == []
        assert files["u2.txt"] == "" and files["u2.rttm"] == ""  # pyannote's loader cannot read an empty file
        assert json.loads(files["u2.json"]) == {"segments": [], "word_segments": [], "language": None}  # no speech
    u1 = exports.unit_files("u1", SEGMENTS, WORDS, TURNS, ["srt", "rttm"])
    assert u1 == {"u1.srt": exports.srt(U1_SEGMENTS, U1_WORDS), "u1.rttm": exports.rttm(TURNS, "u1")}
    assert exports.unit_files("u3", SEGMENTS, WORDS, TURNS, "txt") == {"u3.txt": "[SPEAKER_00 01:02:05.1]: late\n"}


def test_bad_format_and_mixed_units_are_refused():
    with pytest.raises(ValueError, match=r"'docx'.*srt, vtt, txt, json, rttm"):
        exports.unit_files("u1", SEGMENTS, WORDS, TURNS, ["srt", "docx"])
    with pytest.raises(ValueError, match="per unit"):
        exports.srt(SEGMENTS, WORDS)
