"""The gate's two alignments: a baseline's and a candidate's words (edit distance, identical pairs, speakers agreeing
under the best one-to-one label mapping), and speech intervals (what one run's regions do not cover of another's)."""

from __future__ import annotations

import numpy as np


def align(ref: list[str], hyp: list[str]) -> tuple[int, list[tuple[int, int]]]:
    """Levenshtein distance and the index pairs of identical aligned words."""
    n, m = len(ref), len(hyp)
    dist = np.zeros((n + 1, m + 1), dtype=np.int32)
    dist[:, 0] = np.arange(n + 1)
    dist[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            dist[i, j] = min(dist[i - 1, j] + 1, dist[i, j - 1] + 1, dist[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]))
    pairs, i, j = [], n, m
    while i > 0 and j > 0:
        if ref[i - 1] == hyp[j - 1] and dist[i, j] == dist[i - 1, j - 1]:
            pairs.append((i - 1, j - 1))
            i, j = i - 1, j - 1
        elif dist[i, j] == dist[i - 1, j - 1] + 1:
            i, j = i - 1, j - 1
        elif dist[i, j] == dist[i - 1, j] + 1:
            i -= 1
        else:
            j -= 1
    return int(dist[n, m]), pairs[::-1]


def mapped_agreement(pairs_speakers: list[tuple[str | None, str | None]]) -> int:
    from scipy.optimize import linear_sum_assignment

    if not pairs_speakers:
        return 0
    base = sorted({str(a) for a, _ in pairs_speakers})
    cand = sorted({str(b) for _, b in pairs_speakers})
    counts = np.zeros((len(base), len(cand)))
    for a, b in pairs_speakers:
        counts[base.index(str(a)), cand.index(str(b))] += 1
    rows, cols = linear_sum_assignment(-counts)
    return int(counts[rows, cols].sum())


def uncovered(base: list[tuple[float, float]], cand: list[tuple[float, float]]) -> float:
    """Seconds of `base` intervals not covered by the union of `cand` intervals."""
    cand = sorted(cand)
    lost = 0.0
    for start, end in base:
        covered, cursor = 0.0, start
        for c_start, c_end in cand:
            if c_end <= cursor:
                continue
            if c_start >= end:
                break
            lo, hi = max(cursor, c_start), min(end, c_end)
            if hi > lo:
                covered += hi - lo
                cursor = hi
        lost += (end - start) - covered
    return lost
