"""Long recordings with known voices and turns, built from the sample's synthetic dialogues (no Dagster).

`long_recording(seconds, seed)` strings the sample partitions' dialogues (espeak-ng voices: alice, bob,
carol and dave, written by `scripts/make_sample_data.py`) end to end in a seeded random order, each
repetition at its own gain, with a seeded pause between dialogues and a quiet noise floor, until the
recording is `seconds` long; the truth is every turn, shifted to where it landed. The long-unit bench
(`benchmarks/long_units.py`) and the windowing tests build their units with it, so both measure the
same thing: a voice that keeps one label from the first hour to the last. `two_channel_call` makes the dialogues
a contact centre's call, each party on its own channel, replies overlapping (`benchmarks/channels.py`, the
channel tests).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np

from batch_assets.source.decode import TARGET_SAMPLE_RATE, decode_channels, suffix_of

SAMPLE_ROOT = pathlib.Path(__file__).resolve().parents[2] / "sample_data"


@dataclasses.dataclass(frozen=True)
class Dialogue:
    key: str
    audio: np.ndarray  # 16 kHz mono float32
    turns: list[tuple[float, float, str]]  # (start_s, end_s, voice)
    texts: tuple[str, ...] = ()  # each turn's words


@dataclasses.dataclass(frozen=True)
class CallTurn:
    """A turn of a two-channel call: its channel, where it lies in the call, its words."""

    channel: int
    start_s: float
    end_s: float
    text: str


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


def sample_speech(path: pathlib.Path) -> np.ndarray:
    """A sample file's samples, 16 kHz mono, each voice at the level it was spoken: a two-channel sample call (each
    party on its own channel, `scripts/make_sample_data.py`) is its channels summed (a mix would halve each voice)."""
    mix, each, _ = decode_channels(str(path), suffix_of(path.name))
    return mix if each is None else each.sum(axis=0, dtype=np.float32)


def sample_dialogues(root: pathlib.Path = SAMPLE_ROOT, language: str = "en") -> list[Dialogue]:
    """Every sample unit with speech in `language`, decoded (`sample_speech`), with its true turns (in partition,
    then key order)."""
    dialogues = []
    for partition, key, truth in _sample_units(root, language):
        if not truth["turns"]:
            continue
        audio = sample_speech(root / "audio" / partition / key)
        dialogues.append(Dialogue(f"{partition}/{key}", audio,
                                  [(t["start_s"], t["end_s"], t["speaker"]) for t in truth["turns"]],
                                  tuple(t["text"] for t in truth["turns"])))
    return dialogues


def two_channel_call(dialogues: list[Dialogue], overlap_s: float = 0.6, turns: int | None = None
                     ) -> tuple[np.ndarray, list[CallTurn]]:
    """(samples (frames, 2) at 16 kHz, its turns): the turns of `dialogues` (the first `turns` of each) as one call,
    each dialogue's first voice on channel 0 and the others on channel 1, each reply starting `overlap_s` before
    the other party stops (cross-talk), as contact centres record calls: each party on its own channel."""
    pieces, at, placed = [], 0.5, []
    for dialogue in dialogues:
        first = dialogue.turns[0][2]
        for (start, end, voice), text in list(zip(dialogue.turns, dialogue.texts, strict=True))[:turns]:
            cut = dialogue.audio[int((start - 0.1) * TARGET_SAMPLE_RATE) : int((end + 0.1) * TARGET_SAMPLE_RATE)]
            channel = 0 if voice == first else 1
            if placed and placed[-1].channel != channel:
                at = placed[-1].end_s - overlap_s
            pieces.append((channel, int(at * TARGET_SAMPLE_RATE), cut))
            placed.append(CallTurn(channel, at + 0.1, at + 0.1 + end - start, text))
            at += len(cut) / TARGET_SAMPLE_RATE + 0.3
    out = np.zeros((int((at + 0.5) * TARGET_SAMPLE_RATE), 2), dtype=np.float32)
    for channel, start, cut in pieces:
        out[start : start + len(cut), channel] += cut
    return out, placed


def channel_script(turns: list[CallTurn], channel: int) -> str:
    """What a call's channel says, in order."""
    return " ".join(t.text for t in turns if t.channel == channel)


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


def call_figures(words: list[dict], turns: list[CallTurn]) -> tuple[float, float]:
    """(share of a call's words on their channel's speaker, similarity to its script) of its `words` table rows.

    Each speaker label is taken for the channel most of its words were spoken on (a word's channels: those whose
    turn holds its midpoint, 0.3 s either side); a word is right when its label's channel is one of them. The
    similarity is each channel's words, in time order, against what that channel says (1 - the character error rate,
    floored at 0), averaged over the two channels."""
    import jiwer

    def heard_on(row: dict) -> set[int]:
        middle = (row["start_s"] + row["end_s"]) / 2
        return {t.channel for t in turns if t.start_s - 0.3 <= middle <= t.end_s + 0.3}

    rows = [(row["speaker"], heard_on(row), row) for row in words]
    votes: dict = {}
    for speaker, channels, _ in rows:
        for channel in channels:
            votes.setdefault(speaker, {}).setdefault(channel, 0)
            votes[speaker][channel] += 1
    channel_of = {speaker: max(counts, key=counts.get) for speaker, counts in votes.items()}
    right = sum(channel_of.get(speaker) in channels for speaker, channels, _ in rows)
    similarity = []
    for channel in (0, 1):
        said = sorted((row["start_s"], row["word"]) for speaker, _, row in rows if channel_of.get(speaker) == channel)
        heard = " ".join(word for _, word in said) or "<empty>"
        similarity.append(max(0.0, 1 - jiwer.cer(channel_script(turns, channel), heard)))
    return (right / len(rows) if rows else 0.0), float(np.mean(similarity))
