"""Two-channel calls made from the sample's turns: each party on its own channel, each reply starting 0.6 s before the
other party stops (cross-talk), as contact centres record them; and a "stereo" file carrying one mix on both
channels. The script of each call (its turns, channel by channel) comes with it.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import numpy as np
import soundfile as sf

from batch_assets.storage.resource import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_data" / "audio" / "2026-01-15"
TRUTH = json.loads((REPO_ROOT / "sample_data" / "truth" / "2026-01-15.json").read_text())
OVERLAP_S = 0.6
RATE = 16_000


@dataclasses.dataclass(frozen=True)
class Turn:
    channel: int
    start_s: float
    end_s: float
    text: str


def two_channel_call(key: str, turns: int | None = None) -> tuple[np.ndarray, list[Turn]]:
    """(samples (frames, 2) at 16 kHz, the call's turns): the sample `key`'s turns, its first speaker on channel 0,
    the other on channel 1, each reply starting `OVERLAP_S` before the other party stops."""
    audio, rate = sf.read(SAMPLE / key, dtype="float32", always_2d=True)
    assert rate == RATE
    audio = audio.mean(axis=1)
    truth = TRUTH[key]["turns"][:turns]
    first = truth[0]["speaker"]
    pieces, at, placed = [], 0.5, []
    for turn in truth:
        cut = audio[int((turn["start_s"] - 0.1) * rate) : int((turn["end_s"] + 0.1) * rate)]
        channel = 0 if turn["speaker"] == first else 1
        if placed and placed[-1].channel != channel:
            at = placed[-1].end_s - OVERLAP_S
        pieces.append((channel, int(at * rate), cut))
        placed.append(Turn(channel, at + 0.1, at + 0.1 + turn["end_s"] - turn["start_s"], turn["text"]))
        at += len(cut) / rate + 0.3
    out = np.zeros((int((at + 0.5) * rate), 2), dtype=np.float32)
    for channel, start, cut in pieces:
        out[start : start + len(cut), channel] += cut
    return out, placed


def script(turns: list[Turn], channel: int) -> str:
    return " ".join(t.text for t in turns if t.channel == channel)


def write_calls(root: pathlib.Path, turns: int | None = None) -> dict[str, list[Turn]]:
    """Under `root`: an 8 kHz mu-law WAV call, a 16 kHz FLAC call and `meetings/one_mix.wav` (one mix on both
    channels); returns each call's turns by key (the one-mix file: none)."""
    import soxr

    root.mkdir(parents=True, exist_ok=True)
    (root / "calls").mkdir(exist_ok=True)
    (root / "meetings").mkdir(exist_ok=True)
    flac, flac_turns = two_channel_call("calls/2026/support_call.flac", turns)
    sf.write(root / "calls" / "support_call.flac", flac, RATE, subtype="PCM_16")
    phone, phone_turns = two_channel_call("meetings/planning.mp3", turns)
    sf.write(root / "calls" / "phone_call.wav", soxr.resample(phone, RATE, 8000), 8000, subtype="ULAW")
    mix, _ = sf.read(SAMPLE / "meetings" / "standup.wav", dtype="float32")
    sf.write(root / "meetings" / "one_mix.wav", np.stack([mix, mix], axis=1), RATE, subtype="PCM_16")
    return {"calls/support_call.flac": flac_turns, "calls/phone_call.wav": phone_turns}
