"""Compare a candidate run's outputs with a baseline run's for the same partitions.

Bars (all must hold):
- word edit rate (normalised words, all units, candidate vs baseline) <= 1%, and on a partition of several
  languages each language's own (the baseline unit's `language`), so a small language cannot hide in a large one
- speaker agreement (share of aligned, identical words whose speaker agrees after the optimal one-to-one
  label mapping per unit) >= 0.97
- no lost speech: baseline VAD speech not covered by the candidate's VAD, plus the audio of units the
  candidate decoded shorter than declared (`truncated`) or did not decode because the object changed after
  it was listed (`changed_since_listed`, all its declared audio) beyond what the baseline also missed,
  <= max(0.5 s, 0.5%) of the baseline's speech
- no result-class changes (a unit missing on either side counts as a change)
- no words on silent units
- with a truth (`truth`: each partition's true turns per unit, `diarization_error.py`): the candidate's diarization
  error rate against it at most 0.5 points over the baseline's (what the approximate levers are held to)

The candidate's DER against the baseline's own turns is reported in every gate (not held: a candidate may
attribute differently and as well, which only a truth can tell).

With `exact` (what the exact levers promise), every published column as well (`columns.py`): no decision column
changed, each continuous column (word scores, speaker embeddings, VAD scores) within its bound. Without, the
columns of the tables are compared and reported for information (not the VAD score arrays, read only with
`exact`).
"""

from __future__ import annotations

import dataclasses
import re

import polars as pl

from batch_assets.gate.alignment import align, mapped_agreement, uncovered
from batch_assets.gate.columns import SHOWN, VAD_SCORES, ColumnComparison, compare_columns
from batch_assets.gate.diarization_error import MAX_DER_POINTS_WORSE, DiarizationScore, score, turns_by_unit

MAX_WORD_EDIT_RATE = 0.01
MIN_SPEAKER_AGREEMENT = 0.97
LOST_SPEECH_TOLERANCE_S = 0.5
LOST_SPEECH_TOLERANCE_SHARE = 0.005
_PUNCT = re.compile(r"[^\w\s']")


def normalise(word: str) -> str:
    return _PUNCT.sub("", word.lower()).strip()


@dataclasses.dataclass
class GateResult:
    partitions: list[str]
    units: int = 0
    baseline_words: int = 0
    word_edits: int = 0
    aligned_words: int = 0
    speaker_agreeing: int = 0
    baseline_speech_s: float = 0.0
    lost_speech_s: float = 0.0
    class_changes: list[str] = dataclasses.field(default_factory=list)
    words_on_silent_units: int = 0
    exact: bool = False  # also hold every published column (`columns.py`)
    # per language (the baseline unit's; "none" where it has none): [baseline words, word edits]
    by_language: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    columns: ColumnComparison = dataclasses.field(default_factory=ColumnComparison)
    # diarization error rates: the candidate against the baseline's turns (reported), and with a truth both runs
    # against it (held: `MAX_DER_POINTS_WORSE`)
    against_baseline: DiarizationScore = dataclasses.field(default_factory=DiarizationScore)
    truth_given: bool = False
    baseline_vs_truth: DiarizationScore = dataclasses.field(default_factory=DiarizationScore)
    candidate_vs_truth: DiarizationScore = dataclasses.field(default_factory=DiarizationScore)

    @property
    def word_edit_rate(self) -> float:
        return self.word_edits / self.baseline_words if self.baseline_words else float(self.word_edits > 0)

    def language_edit_rates(self) -> dict[str, float]:
        return {lang: edits / words if words else float(edits > 0)
                for lang, (words, edits) in sorted(self.by_language.items())}

    @property
    def speaker_agreement(self) -> float:
        return self.speaker_agreeing / self.aligned_words if self.aligned_words else 1.0

    @property
    def der_points_worse(self) -> float:
        """The candidate's DER against the truth minus the baseline's, in points."""
        return 100 * (self.candidate_vs_truth.rate - self.baseline_vs_truth.rate)

    @property
    def lost_speech_allowed_s(self) -> float:
        return max(LOST_SPEECH_TOLERANCE_S, LOST_SPEECH_TOLERANCE_SHARE * self.baseline_speech_s)

    def bars(self) -> list[tuple[str, str, str, bool]]:
        return [
            ("word edit rate", f"{self.word_edit_rate:.4f}", f"<= {MAX_WORD_EDIT_RATE}",
             self.word_edit_rate <= MAX_WORD_EDIT_RATE),
            *[(f"word edit rate [{lang}]", f"{rate:.4f}", f"<= {MAX_WORD_EDIT_RATE}", rate <= MAX_WORD_EDIT_RATE)
              for lang, rate in (self.language_edit_rates().items() if len(self.by_language) > 1 else ())],
            ("speaker agreement", f"{self.speaker_agreement:.4f}", f">= {MIN_SPEAKER_AGREEMENT}",
             self.speaker_agreement >= MIN_SPEAKER_AGREEMENT),
            ("lost speech s", f"{self.lost_speech_s:.2f}", f"<= {self.lost_speech_allowed_s:.2f}",
             self.lost_speech_s <= self.lost_speech_allowed_s),
            ("result-class changes", str(len(self.class_changes)), "== 0", not self.class_changes),
            ("words on silent units", str(self.words_on_silent_units), "== 0", self.words_on_silent_units == 0),
            *([("DER vs truth, points over baseline", f"{self.der_points_worse:+.2f}", f"<= {MAX_DER_POINTS_WORSE}",
                self.der_points_worse <= MAX_DER_POINTS_WORSE)] if self.truth_given else []),
        ] + (self.columns.bars() if self.exact else [])

    @property
    def passed(self) -> bool:
        return all(ok for *_, ok in self.bars())

    def table(self) -> str:
        bars = self.bars()
        width = max(len(name) for name, *_ in bars)
        lines = [f"gate over {', '.join(self.partitions)}: {self.units} units, {self.baseline_words} baseline words"
                 + (" (exact: every published column)" if self.exact else ""),
                 f"{'bar':{width}s} {'value':>10s} {'needs':>10s}  result"]
        lines += [f"{name:{width}s} {value:>10s} {need:>10s}  {'PASS' if ok else 'FAIL'}"
                  for name, value, need, ok in bars]
        lines += [f"  class change: {c}" for c in self.class_changes[:20]]
        lines.append(f"DER against the baseline's turns (reported): {100 * self.against_baseline.rate:.2f} %"
                     + (f"; against the truth: baseline {100 * self.baseline_vs_truth.rate:.2f} %, candidate "
                        f"{100 * self.candidate_vs_truth.rate:.2f} %" if self.truth_given else ""))
        if not self.exact:  # the column figures, for information
            lines.append("columns (not held: run with --exact): " + ", ".join(
                [f"{len(self.columns.changed)} decision columns changed"]
                + [f"{column} max |diff| {value:.2e}" for column, value in self.columns.largest.items()
                   if column != VAD_SCORES]))  # the arrays are read only with --exact
        lines += [f"  column change: {c}" for c in self.columns.changed[:SHOWN]]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"partitions": self.partitions, "units": self.units, "word_edit_rate": self.word_edit_rate,
                "word_edit_rate_by_language": self.language_edit_rates(),
                "speaker_agreement": self.speaker_agreement, "lost_speech_s": self.lost_speech_s,
                "class_changes": self.class_changes, "words_on_silent_units": self.words_on_silent_units,
                "exact": self.exact, "der_vs_baseline": self.against_baseline.rate,
                **({"der_vs_truth": {"baseline": self.baseline_vs_truth.rate,
                                     "candidate": self.candidate_vs_truth.rate,
                                     "points_worse": self.der_points_worse}} if self.truth_given else {}),
                **self.columns.as_dict(), "passed": self.passed}


def compare_partition(result: GateResult, baseline: dict[str, pl.DataFrame],
                      candidate: dict[str, pl.DataFrame], truth: dict | None = None) -> None:
    """Add one partition's figures to `result`; `truth`: its true turns per unit, when known."""
    b_units = {r["unit_id"]: r for r in baseline["units"].iter_rows(named=True)}
    c_units = {r["unit_id"]: r for r in candidate["units"].iter_rows(named=True)}
    for uid in sorted(set(b_units) | set(c_units)):
        b_class = b_units.get(uid, {}).get("result_class", "<missing>")
        c_class = c_units.get(uid, {}).get("result_class", "<missing>")
        if b_class != c_class:
            result.class_changes.append(f"{uid}: {b_class} -> {c_class}")
    result.units += len(b_units)

    b_words_by_unit, c_words_by_unit = _by_unit(baseline["words"]), _by_unit(candidate["words"])
    for uid in b_units:
        b_words, b_speakers = _words(b_words_by_unit.get(uid))
        c_words, c_speakers = _words(c_words_by_unit.get(uid))
        edits, pairs = align(b_words, c_words)
        result.baseline_words += len(b_words)
        result.word_edits += edits
        counts = result.by_language.setdefault(b_units[uid].get("language") or "none", [0, 0])
        counts[0], counts[1] = counts[0] + len(b_words), counts[1] + edits
        result.aligned_words += len(pairs)
        result.speaker_agreeing += mapped_agreement([(b_speakers[i], c_speakers[j]) for i, j in pairs])

    def count_words(uid: str) -> int:
        frame = c_words_by_unit.get(uid)
        return 0 if frame is None else frame.height

    for uid, row in c_units.items():
        if row["result_class"] == "silent":
            result.words_on_silent_units += count_words(uid)
    for uid, row in b_units.items():
        if row["result_class"] == "silent" and uid in c_units and c_units[uid]["result_class"] != "silent":
            result.words_on_silent_units += count_words(uid)

    b_regions, c_regions = _by_unit(baseline["regions"]), _by_unit(candidate["regions"])
    for uid in b_units:
        base = _intervals(b_regions.get(uid))
        result.baseline_speech_s += sum(e - s for s, e in base)
        result.lost_speech_s += uncovered(base, _intervals(c_regions.get(uid)))
    for uid, row in c_units.items():  # audio the candidate never decoded is speech it may have lost
        result.lost_speech_s += max(0.0, _undecoded_s(row) - _undecoded_s(b_units.get(uid, {})))

    b_turns, c_turns = turns_by_unit(baseline["turns"]), turns_by_unit(candidate["turns"])
    score(b_turns, c_turns, result.against_baseline, units=sorted(b_units))
    if truth is not None:
        truth = _truth_by_unit_id(truth, b_units)
        result.truth_given = True
        score(truth, b_turns, result.baseline_vs_truth)
        score(truth, c_turns, result.candidate_vs_truth)


def _truth_by_unit_id(truth: dict, units) -> dict:
    """The truth keyed by the partition's unit ids: a key is a unit id, or a source path (`meetings/standup.wav`,
    as the sample's truth files name them) whose unit id is one; a key that is neither is refused, naming it (a
    truth of other units would score nothing and pass)."""
    from batch_assets.ingest.units import unit_id

    out, unknown = {}, []
    for key, turns in truth.items():
        uid = key if key in units else unit_id(key)
        if uid in units:
            out[uid] = turns
        else:
            unknown.append(key)
    if unknown:
        raise ValueError(f"the truth names units the baseline does not have: {', '.join(sorted(unknown)[:10])} (keys "
                         f"are unit ids or source paths relative to the partition folder)")
    return out


def _undecoded_s(row: dict) -> float:
    """Declared seconds a unit did not decode: what a `truncated` unit missed, all of a `changed_since_listed` one
    (the object read to decode was not the one listed, so none of the listed audio was heard); 0 for every other
    unit, and for older tables."""
    declared, decoded = row.get("declared_duration_s"), row.get("duration_s")
    if row.get("result_class") == "changed_since_listed":
        return declared or 0.0
    if row.get("result_class") != "truncated" or declared is None or decoded is None:
        return 0.0
    return max(0.0, declared - decoded)


def _by_unit(frame: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """One pass over a table instead of one filter per unit."""
    return {key[0]: part for key, part in frame.partition_by("unit_id", as_dict=True).items()}


def _words(frame: pl.DataFrame | None) -> tuple[list[str], list[str | None]]:
    """A unit's normalised words (empty ones dropped) and their speakers, in word order."""
    if frame is None:
        return [], []
    rows = frame.sort("word_index")
    kept = [(normalise(w), spk) for w, spk in zip(rows["word"], rows["speaker"], strict=True) if normalise(w)]
    return [w for w, _ in kept], [spk for _, spk in kept]


def _intervals(frame: pl.DataFrame | None) -> list[tuple[float, float]]:
    if frame is None:
        return []
    return list(zip(frame["start_s"].to_list(), frame["end_s"].to_list(), strict=True))


def read_outputs(storage, partition: str) -> dict[str, pl.DataFrame]:
    return {
        "units": storage.read_parquet("transcripts", partition, "units"),
        "words": storage.read_parquet("transcripts", partition, "words"),
        "regions": storage.read_parquet("vad_scores", partition, "regions"),
        "turns": storage.read_parquet("diarization", partition, "turns"),
    }


def gate(baseline_storage, candidate_storage, partitions: list[str], exact: bool = False,
         truth: dict[str, dict] | None = None) -> GateResult:
    """`exact`: also hold every published column (what the exact levers promise); otherwise its figures are only
    reported. `truth`: per partition, its true turns per unit (`{unit_id: [[start_s, end_s, speaker], ...]}`):
    then the candidate's DER against it is held to at most 0.5 points over the baseline's."""
    result = GateResult(partitions=list(partitions), exact=exact)
    for partition in partitions:
        compare_partition(result, read_outputs(baseline_storage, partition), read_outputs(candidate_storage, partition),
                          None if truth is None else truth[partition])
        compare_columns(result.columns, baseline_storage, candidate_storage, partition, arrays=exact)
    return result
