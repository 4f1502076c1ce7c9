"""Speaker attribution by overlap, nearest turn when a word overlaps none."""

from __future__ import annotations

import numpy as np

from batch_assets.gpu.section.attribution import attribute_speakers


def test_max_overlap_then_nearest():
    turns = [(0.0, 2.0, "A"), (1.8, 4.0, "B"), (6.0, 7.0, "C")]
    starts = np.array([0.5, 1.7, 3.0, 4.5, 5.8, 9.0])
    ends = np.array([1.0, 2.5, 3.5, 4.8, 6.3, 9.5])
    assert attribute_speakers(starts, ends, turns) == ["A", "B", "B", "B", "C", "C"]


def test_no_turns_no_speaker():
    assert attribute_speakers(np.array([0.0]), np.array([1.0]), []) == [None]


def test_many_words_vectorised():
    rng = np.random.default_rng(0)
    turns = [(float(i), float(i) + 1.0, f"S{i % 3}") for i in range(500)]
    starts = np.sort(rng.uniform(0, 500, 5000))
    ends = starts + 0.2
    labels = attribute_speakers(starts, ends, turns)
    mids = (starts + ends) / 2
    # a word wholly inside one turn gets that turn's speaker
    inside = np.floor(starts) == np.floor(ends)
    expected = [f"S{int(np.floor(m)) % 3}" for m in mids]
    assert all(a == b for a, b, ok in zip(labels, expected, inside, strict=True) if ok)
