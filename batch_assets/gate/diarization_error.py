"""Diarization error rate (pyannote.metrics, no collar, overlap scored) of a run's turns against a reference: the
truth where one is known (the bench's dialogues, the sample partitions), or another run's turns.

Turns are (start_s, end_s, speaker) per unit: `turns_by_unit` reads them from a `diarization/turns` table (the
non-exclusive turns, as the metric scores overlap); a truth file holds one partition's, either as
`{unit_id: [[start_s, end_s, speaker], ...]}` (the benches' dialogues) or as the sample partitions' truth
(`sample_data/truth/<partition>.json`: `{unit_id: {"turns": [{"start_s", "end_s", "speaker", ...}]}}`).
The gate (`compare.py`) holds a candidate's DER against the truth to at most `MAX_DER_POINTS_WORSE` over its
baseline's.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import polars as pl

MAX_DER_POINTS_WORSE = 0.5

Turns = list[tuple[float, float, str]]


@dataclasses.dataclass
class DiarizationScore:
    """Errors and reference speech, summed over units (seconds); `mappings`: each unit's optimal mapping of
    hypothesis speakers to reference speakers."""

    error_s: float = 0.0
    reference_s: float = 0.0
    mappings: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.error_s / self.reference_s if self.reference_s else 0.0


def turns_by_unit(turns: pl.DataFrame) -> dict[str, Turns]:
    """A `diarization/turns` table's non-exclusive turns, per unit."""
    out: dict[str, Turns] = {}
    for row in turns.filter(~pl.col("exclusive")).iter_rows(named=True):
        out.setdefault(row["unit_id"], []).append((row["start_s"], row["end_s"], str(row["speaker"])))
    return out


def read_truth(path: pathlib.Path) -> dict[str, Turns]:
    """One partition's true turns per unit, from either truth format (module docstring)."""
    out: dict[str, Turns] = {}
    for uid, value in json.loads(pathlib.Path(path).read_text()).items():
        if isinstance(value, dict):
            out[uid] = [(t["start_s"], t["end_s"], str(t["speaker"])) for t in value.get("turns", [])]
        else:
            out[uid] = [(float(start), float(end), str(speaker)) for start, end, speaker in value]
    return out


def score(reference: dict[str, Turns], hypothesis: dict[str, Turns], into: DiarizationScore | None = None,
          units=None) -> DiarizationScore:
    """Add each unit's errors of `hypothesis` against `reference` (`units`: those scored, default the reference's;
    a unit missing from the hypothesis has all its reference speech missed) to `into` (a new score by default)."""
    from pyannote.core import Annotation, Segment
    from pyannote.metrics.diarization import DiarizationErrorRate

    score = into or DiarizationScore()
    for uid in reference if units is None else units:
        ref, hyp = Annotation(uri=uid), Annotation(uri=uid)
        for start, end, speaker in reference.get(uid, []):
            ref[Segment(start, end), len(ref)] = str(speaker)
        for start, end, speaker in hypothesis.get(uid, []):
            hyp[Segment(start, end), len(hyp)] = str(speaker)
        metric = DiarizationErrorRate(collar=0.0, skip_overlap=False)
        components = metric(ref, hyp, detailed=True)
        score.error_s += (components["confusion"] + components["missed detection"] + components["false alarm"])
        score.reference_s += components["total"]
        score.mappings[uid] = {str(k): str(v) for k, v in metric.optimal_mapping(ref, hyp).items()}
    return score
