"""Synthetic speech with exact transcripts: espeak-ng voices reading sentences of a language's common words.

The sentences come from `models/sentences.py`. Voices are espeak-ng accents x voice variants, each
utterance at a random rate and pitch, with light background noise and gain. The splits are
disjoint by sentence (held-out sentences never appear in training), and one test split uses voices
that training never heard. English, Spanish, German and Japanese each have their own voices (`VOICES`).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import subprocess
import tempfile

import numpy as np
import soundfile as sf
import soxr

RATE = 16_000
TRAIN_ACCENTS = ["en-us", "en-gb", "en-gb-x-rp", "en-029", "en"]
TRAIN_VARIANTS = ["", "+m1", "+m3", "+m7", "+f2", "+f3", "+f5"]
HELD_OUT_VOICES = ["en-gb-scotland+m4", "en-us-nyc+f4", "en-gb-x-gbclan+m6"]


@dataclasses.dataclass(frozen=True)
class LanguageVoices:
    accents: tuple[str, ...]  # espeak-ng voices of the language, each with every training variant
    held_out: tuple[str, ...]  # accent + variant pairs training never hears

    def train(self) -> list[str]:
        return [accent + variant for accent in self.accents for variant in TRAIN_VARIANTS]


VOICES = {
    "en": LanguageVoices(tuple(TRAIN_ACCENTS), tuple(HELD_OUT_VOICES)),
    "es": LanguageVoices(("es", "es-419"), ("es+m4", "es-419+f4", "es+m6")),
    "de": LanguageVoices(("de",), ("de+m4", "de+f4", "de+m6")),
    "ja": LanguageVoices(("ja",), ("ja+m4", "ja+f4", "ja+m6")),  # for language identification (no Japanese TDT)
}


def train_voices(language: str = "en") -> list[str]:
    return VOICES[language].train()


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
        (text, voices[int(rng.integers(len(voices)))], int(rng.integers(130, 200)), int(rng.integers(25, 80)),
         seed * 100003 + i)
        for i, text in enumerate(sentences)
    ]
    with multiprocessing.Pool(processes) as pool:
        return pool.map(_synthesize, jobs, chunksize=16)
