"""Long recordings with known voices and turns, built from the sample's synthetic dialogues (no Dagster).

`long_recording(seconds, seed)` strings the sample partitions' dialogues (espeak-ng voices: alice, bob,
carol and dave, written by `scripts/make_sample_data.py`) end to end in a seeded random order, each
repetition at its own gain, with a seeded pause between dialogues and a quiet noise floor, until the
recording is `seconds` long; the truth is every turn, shifted to where it landed. The long-unit bench
(`benchmarks/long_units.py`) and the windowing tests build their units with it, so both measure the
same thing: a voice that keeps one label from the first hour to the last.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np

from batch_assets.source.decode import TARGET_SAMPLE_RATE, decode_file, suffix_of

SAMPLE_ROOT = pathlib.Path(__file__).resolve().parents[2] / "sample_data"


@dataclasses.dataclass(frozen=True)
class Dialogue:
    key: str
    audio: np.ndarray  # 16 kHz mono float32
    turns: list[tuple[float, float, str]]  # (start_s, end_s, voice)


def _sample_units(root: pathlib.Path, language: str):
    """(partition, key, truth) of each sample unit spoken in `language` (a truth without one is English), and of
    each unit without speech, in partition, then key order."""
    for truth_file in sorted((root / "truth").glob("*.json")):
        for key, truth in sorted(json.loads(truth_file.read_text()).items()):
            if not truth["turns"] or truth.get("language", "en") == language:
                yield truth_file.stem, key, truth


def sample_audio_paths(root: pathlib.Path = SAMPLE_ROOT, speech_only: bool = False,
                       language: str = "en") -> list[pathlib.Path]:
    """The sample partitions' audio files of units in `language` (English: the benches cut their corpora from these),
    in path order, and with `speech_only` without the silent room."""
    return sorted(root / "audio" / partition / key for partition, key, truth in _sample_units(root, language)
                  if truth["turns"] or not speech_only)


def sample_dialogues(root: pathlib.Path = SAMPLE_ROOT, language: str = "en") -> list[Dialogue]:
    """Every sample unit with speech in `language`, decoded, with its true turns (in partition, then key order)."""
    dialogues = []
    for partition, key, truth in _sample_units(root, language):
        if not truth["turns"]:
            continue
        audio, _ = decode_file(str(root / "audio" / partition / key), suffix_of(key))
        dialogues.append(Dialogue(f"{partition}/{key}", audio,
                                  [(t["start_s"], t["end_s"], t["speaker"]) for t in truth["turns"]]))
    return dialogues


def long_recording(seconds: float, seed: int, dialogues: list[Dialogue] | None = None
                   ) -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    """(audio, true turns) of a recording at least `seconds` long (it ends after the dialogue that reaches it)."""
    dialogues = dialogues if dialogues is not None else sample_dialogues()
    rng = np.random.default_rng(seed)
    pieces, turns, cursor = [], [], 0
    while cursor < seconds * TARGET_SAMPLE_RATE:
        for index in rng.permutation(len(dialogues)):
            dialogue = dialogues[index]
            gap = np.zeros(int(rng.uniform(0.5, 2.0) * TARGET_SAMPLE_RATE), dtype=np.float32)
            pieces.append(gap)
            cursor += len(gap)
            start = cursor / TARGET_SAMPLE_RATE
            pieces.append((dialogue.audio * rng.uniform(0.7, 1.2)).astype(np.float32))
            cursor += len(dialogue.audio)
            turns.extend((round(start + s, 3), round(start + e, 3), voice) for s, e, voice in dialogue.turns)
            if cursor >= seconds * TARGET_SAMPLE_RATE:
                break
    audio = np.concatenate(pieces)
    audio += rng.normal(0.0, 0.002, size=audio.shape).astype(np.float32)
    return audio, turns
