"""Synthetic speakers and dialogues with exact speaker turns, for the diarization models.

A speaker is an espeak-ng voice (accent x voice variant) with a fixed pitch and rate, so that each one
sounds consistently like itself. Dialogues put 2-3 speakers in turns with pauses and, now and then,
overlapping speech; the turns are exact because we place every utterance ourselves.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from batch_assets.models.sentences import make_sentences
from batch_assets.training.corpus import RATE, pool_map, speak

ACCENTS = ["en-us", "en-gb", "en-gb-x-rp", "en-029", "en", "en-gb-scotland", "en-us-nyc", "en-gb-x-gbclan",
           "en-gb-x-gbcwmd"]
VARIANTS = ["", "+m1", "+m2", "+m3", "+m4", "+m5", "+m6", "+m7", "+f1", "+f2", "+f3", "+f4", "+f5"]


@dataclasses.dataclass(frozen=True)
class Speaker:
    name: str
    voice: str
    pitch: int
    wpm: int


def make_speakers(count: int, rng: np.random.Generator) -> list[Speaker]:
    combos = [(a, v) for a in ACCENTS for v in VARIANTS]
    picks = rng.choice(len(combos), size=min(count, len(combos)), replace=False)
    return [
        Speaker(f"spk{i:03d}", combos[c][0] + combos[c][1], int(rng.integers(20, 85)), int(rng.integers(125, 195)))
        for i, c in enumerate(picks)
    ]


def _speak(job) -> np.ndarray:
    text, speaker = job
    return speak(text, speaker.voice, speaker.wpm, speaker.pitch)


def utterance_pool(speakers: list[Speaker], per_speaker: int, rng: np.random.Generator,
                   processes: int = 2) -> dict[str, list[np.ndarray]]:
    sentences = make_sentences(len(speakers) * per_speaker, rng, lengths=(3, 10))
    jobs = [(sentences[i * per_speaker + j], s) for i, s in enumerate(speakers) for j in range(per_speaker)]
    clips = pool_map(_speak, jobs, processes)
    pool_by_speaker: dict[str, list[np.ndarray]] = {s.name: [] for s in speakers}
    for (_, speaker), clip in zip(jobs, clips, strict=True):
        pool_by_speaker[speaker.name].append(clip.astype(np.float32))
    return pool_by_speaker


def dialogue(pool: dict[str, list[np.ndarray]], rng: np.random.Generator, speakers: int | None = None,
             turns: tuple[int, int] = (6, 12),
             overlap_p: float = 0.1, utterances_per_turn: tuple[int, int] = (1, 1),
             ) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    names = list(pool)
    chosen = list(rng.choice(names, size=min(len(names), speakers or int(rng.integers(2, 4))), replace=False))
    pieces: list[tuple[int, np.ndarray]] = []
    out_turns = []
    cursor = int(rng.uniform(0.2, 1.0) * RATE)
    previous = None
    for _ in range(int(rng.integers(turns[0], turns[1] + 1))):
        name = rng.choice([n for n in chosen if n != previous]) if len(chosen) > 1 else chosen[0]
        clip = pool[name][int(rng.integers(len(pool[name])))] * rng.uniform(0.4, 1.0)
        lo, hi = utterances_per_turn  # (1, 1) draws nothing: the training corpora stay what they were
        for _ in range(int(rng.integers(lo, hi + 1)) - 1 if (lo, hi) != (1, 1) else 0):  # a speaker talks on
            gap = np.zeros(int(rng.uniform(0.1, 0.4) * RATE), dtype=np.float32)
            clip = np.concatenate([clip, gap, pool[name][int(rng.integers(len(pool[name])))] * rng.uniform(0.4, 1.0)])
        start = cursor
        if out_turns and rng.random() < overlap_p:
            start = max(0, cursor - int(rng.uniform(0.3, 1.0) * RATE))
        pieces.append((start, clip))
        out_turns.append((str(name), start / RATE, (start + len(clip)) / RATE))
        cursor = start + len(clip) + int(rng.uniform(0.3, 1.5) * RATE)
        previous = name
    audio = np.zeros(cursor, dtype=np.float32)
    for start, clip in pieces:
        audio[start : start + len(clip)] += clip
    audio += rng.normal(0.0, rng.uniform(0.0005, 0.005), size=audio.shape).astype(np.float32)
    return audio, out_turns
