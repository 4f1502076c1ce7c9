"""Synthetic speech with exact transcripts: espeak-ng voices reading sentences of a language's common words.

The sentences come from `models/sentences.py`. Voices are espeak-ng accents x voice variants, each
utterance at a random rate and pitch, with light background noise and gain. The splits are
disjoint by sentence (held-out sentences never appear in training), and one test split uses voices
that training never heard. English, Spanish, German and Japanese each have their own voices (`VOICES`).

A language written without spaces (Japanese: `languages.UNSPACED`) is transcribed without them
(`languages.written`): the sentence of words is spoken with its spaces or without them (seeded, half each:
espeak-ng phrases the two differently, and a caller's text may come either way), and its transcript is the words
run together.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import signal
import subprocess
import tempfile

import numpy as np
import soundfile as sf
import soxr

from batch_assets.models.languages import UNSPACED, word_separator, written

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
    "ja": LanguageVoices(("ja",), ("ja+m4", "ja+f4", "ja+m6")),
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


def _synthesize(job: tuple[str, str, int, int, int, float]) -> Utterance:
    text, voice, wpm, pitch, seed, pad_s = job
    rng = np.random.default_rng(seed)
    audio = speak(text, voice, wpm, pitch) * rng.uniform(0.3, 0.9) / 0.9
    if pad_s:  # room before and after the speech, as the section's padded, merged segments have it
        audio = np.pad(audio, [int(rng.uniform(0.0, pad_s) * RATE) for _ in range(2)])
    audio = audio + rng.normal(0.0, rng.uniform(0.0005, 0.006), size=audio.shape).astype(np.float32)
    return Utterance(text, voice, audio.astype(np.float32))


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def pool_map(function, jobs: list, processes: int) -> list:
    """`multiprocessing.Pool.map` over `jobs`, its workers ended by a clean close, each with SIGINT and SIGTERM at
    their defaults. Why: forked workers inherit their parent's Python-level signal handlers, and a process that ran
    Dagster in process has SIGTERM raising KeyboardInterrupt (Dagster's interrupt handling leaves it so); the SIGTERM
    with which `Pool.terminate` (a `with Pool()` block's end) stops idle workers then raised inside them, and a
    pool hung for ever (seen in a test run: `tests/test_training_grammar.py`)."""
    pool = multiprocessing.Pool(processes, initializer=_default_signals)
    try:
        results = pool.map(function, jobs, chunksize=16)
        pool.close()
    except BaseException:
        pool.terminate()
        raise
    finally:
        pool.join()
    return results


def synthesize(sentences: list[str], voices: list[str], seed: int, processes: int = 2,
               language: str = "en", pad_s: float = 0.0) -> list[Utterance]:
    """Each sentence spoken by one of `voices` (seeded); `pad_s`: up to that much quiet room (the background noise
    alone) before and after each utterance."""
    if not sentences:  # no worker pool for nothing (an optional split, e.g. train_asr without --grammar)
        return []
    rng = np.random.default_rng(seed)
    jobs = [
        (text, voices[int(rng.integers(len(voices)))], int(rng.integers(130, 200)), int(rng.integers(25, 80)),
         seed * 100003 + i, pad_s)
        for i, text in enumerate(sentences)
    ]
    unspaced = language in UNSPACED
    if unspaced:  # spoken with or without its spaces, half each (drawn after the voices: their draw is unchanged)
        jobs = [(written(text, language) if rng.random() < 0.5 else text, *rest) for text, *rest in jobs]
    utterances = pool_map(_synthesize, jobs, processes)
    if unspaced:
        utterances = [dataclasses.replace(u, text=written(u.text, language)) for u in utterances]
    return utterances


def join_utterances(utterances: list[Utterance], most: int, seed: int, language: str = "en") -> list[Utterance]:
    """Runs of 1 to `most` consecutive utterances, each run one utterance: the speech joined by pauses of 0.3-1.2 s
    of quiet room, the transcripts by the language's separator. What the section hands a model: VAD's regions
    merged across pauses into segments of up to 30 s, several turns each."""
    rng = np.random.default_rng(seed)
    joined, i = [], 0
    while i < len(utterances):
        run = utterances[i : i + int(rng.integers(1, most + 1))]
        i += len(run)
        pieces = [run[0].audio]
        for u in run[1:]:
            pause = rng.normal(0.0, rng.uniform(0.0005, 0.006), int(rng.uniform(0.3, 1.2) * RATE))
            pieces += [pause.astype(np.float32), u.audio]
        joined.append(Utterance(word_separator(language).join(u.text for u in run), run[0].voice,
                                np.concatenate(pieces)))
    return joined
