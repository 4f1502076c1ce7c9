"""Attribute each word to a speaker: the diarization turn it overlaps most, else the nearest turn.

Vectorised over words and turns in blocks, so a long unit (thousands of words, hundreds of turns)
costs milliseconds, not a Python double loop.
"""

from __future__ import annotations

import numpy as np

BLOCK = 2048


def attribute_speakers(
    word_starts: np.ndarray,
    word_ends: np.ndarray,
    turns: list[tuple[float, float, str]],
) -> list[str | None]:
    if len(word_starts) == 0:
        return []
    if not turns:
        return [None] * len(word_starts)
    t_start = np.array([t[0] for t in turns])
    t_end = np.array([t[1] for t in turns])
    labels = [t[2] for t in turns]
    chosen = np.empty(len(word_starts), dtype=np.int64)
    for lo in range(0, len(word_starts), BLOCK):
        ws = word_starts[lo : lo + BLOCK, None]
        we = word_ends[lo : lo + BLOCK, None]
        overlap = np.minimum(we, t_end) - np.maximum(ws, t_start)
        gap = np.maximum(t_start - we, ws - t_end)  # >0: distance to a turn the word misses
        score = np.where(overlap > 0, overlap, -np.maximum(gap, 0.0) - 1e-9)
        chosen[lo : lo + BLOCK] = np.argmax(score, axis=1)
    return [labels[i] for i in chosen]
