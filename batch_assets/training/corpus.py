"""Synthetic speech with exact transcripts: espeak-ng voices reading sentences of common English words.

Sentences draw on the most frequent English words (wordfreq's list, not a hand-typed one), with a
Zipf-like bias so frequent words come up more often. Voices are espeak-ng accents x voice variants,
each utterance at a random rate and pitch, with light background noise and gain. The splits are
disjoint by sentence (held-out sentences never appear in training), and one test split uses voices
that training never heard.
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing
import re
import subprocess
import tempfile

import numpy as np
import soundfile as sf
import soxr

RATE = 16_000
# The builtin ASR model's vocabulary: the N most common English words. Small enough for a ~1 M-parameter
# model trained for an hour on two CPU cores to learn every word from many voices; the sample partition is
# written in it (scripts/make_sample_data.py checks).
ASR_VOCABULARY_WORDS = 500
TRAIN_ACCENTS = ["en-us", "en-gb", "en-gb-x-rp", "en-029", "en"]
TRAIN_VARIANTS = ["", "+m1", "+m3", "+m7", "+f2", "+f3", "+f5"]
HELD_OUT_VOICES = ["en-gb-scotland+m4", "en-us-nyc+f4", "en-gb-x-gbclan+m6"]
_WORD = re.compile(r"^[a-z]+$")


@functools.lru_cache(maxsize=4)
def common_words(n: int = 3000) -> tuple[str, ...]:
    from wordfreq import top_n_list

    words = [w for w in top_n_list("en", n * 2) if _WORD.match(w)]
    return tuple(words[:n])


def outside_vocabulary(sentences, n: int = ASR_VOCABULARY_WORDS) -> set[str]:
    """The words of `sentences` that are not among the N most common words (the ASR model's vocabulary)."""
    return {word for sentence in sentences for word in sentence.split()} - set(common_words(n))


def train_voices() -> list[str]:
    return [accent + variant for accent in TRAIN_ACCENTS for variant in TRAIN_VARIANTS]


def make_sentences(count: int, rng: np.random.Generator, vocabulary: int = 3000, lengths=(3, 12)) -> list[str]:
    words = common_words(vocabulary)
    ranks = np.arange(1, len(words) + 1)
    weights = 1.0 / ranks**0.6  # flatter than Zipf: rare words still come up
    weights /= weights.sum()
    sentences, seen = [], set()
    while len(sentences) < count:
        n = int(rng.integers(lengths[0], lengths[1] + 1))
        sentence = " ".join(words[i] for i in rng.choice(len(words), size=n, p=weights))
        if sentence not in seen:
            seen.add(sentence)
            sentences.append(sentence)
    return sentences


@dataclasses.dataclass
class Utterance:
    text: str
    voice: str
    audio: np.ndarray  # 16 kHz mono float32


def speak(text: str, voice: str, wpm: int, pitch: int) -> np.ndarray:
    with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-p", str(pitch), "-w", tmp.name, text],
                       check=True, capture_output=True)
        audio, rate = sf.read(tmp.name, dtype="float32")
    audio = soxr.resample(audio, rate, RATE).astype(np.float32)
    voiced = np.flatnonzero(np.abs(audio) > 0.01)
    if len(voiced) == 0:
        return audio
    return audio[max(0, voiced[0] - 800) : voiced[-1] + 800]


def _synthesize(job: tuple[str, str, int, int, int]) -> Utterance:
    text, voice, wpm, pitch, seed = job
    rng = np.random.default_rng(seed)
    audio = speak(text, voice, wpm, pitch) * rng.uniform(0.3, 0.9) / 0.9
    audio = audio + rng.normal(0.0, rng.uniform(0.0005, 0.006), size=audio.shape).astype(np.float32)
    return Utterance(text, voice, audio.astype(np.float32))


def synthesize(sentences: list[str], voices: list[str], seed: int, processes: int = 2) -> list[Utterance]:
    if not sentences:  # no worker pool for nothing (an optional split, e.g. train_asr without --grammar)
        return []
    rng = np.random.default_rng(seed)
    jobs = [
        (text, voices[int(rng.integers(len(voices)))], int(rng.integers(130, 200)), int(rng.integers(25, 80)), seed * 100003 + i)
        for i, text in enumerate(sentences)
    ]
    with multiprocessing.Pool(processes) as pool:
        return pool.map(_synthesize, jobs, chunksize=16)
