"""Two-channel calls made from the sample's dialogues (`long_units/long_audio.py: two_channel_call`): each party on its
own channel, each reply starting 0.6 s before the other party stops; and a "stereo" file carrying one mix on both
channels. The turns of each call (its script, channel by channel) come with it.
"""

from __future__ import annotations

import functools
import pathlib

import numpy as np
import soundfile as sf

from batch_assets.long_units.long_audio import CallTurn, sample_dialogues, two_channel_call
from batch_assets.storage.resource import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_data" / "audio" / "2026-01-15"
RATE = 16_000
ECHO = 0.05  # -26 dB
LONG_CALL = ("calls/2026/support_call.flac", "meetings/planning.mp3", "meetings/standup.wav")


@functools.cache
def _dialogues() -> dict:
    return {d.key.split("/", 1)[1]: d for d in sample_dialogues() if d.key.startswith("2026-01-15/")}


def call_of(keys: tuple[str, ...], turns: int | None = None) -> tuple[np.ndarray, list[CallTurn]]:
    """The two-channel call of the 2026-01-15 sample dialogues `keys`."""
    return two_channel_call([_dialogues()[key] for key in keys], turns=turns)


def write_calls(root: pathlib.Path) -> dict[str, list[CallTurn]]:
    """Under `root`: an 8 kHz mu-law WAV call (with line echo: each party at -26 dB on the other's channel), a 16 kHz
    FLAC call and `meetings/one_mix.wav` (one mix on both channels); returns each call's turns by key."""
    import soxr

    (root / "calls").mkdir(parents=True, exist_ok=True)
    (root / "meetings").mkdir(exist_ok=True)
    flac, flac_turns = call_of(("calls/2026/support_call.flac",))
    sf.write(root / "calls" / "support_call.flac", flac, RATE, subtype="PCM_16")
    phone, phone_turns = call_of(("meetings/planning.mp3",))
    phone = phone + ECHO * phone[:, ::-1]  # line echo: each party heard faintly on the other's channel
    sf.write(root / "calls" / "phone_call.wav", soxr.resample(phone, RATE, 8000), 8000, subtype="ULAW")
    mix, _ = sf.read(SAMPLE / "meetings" / "standup.wav", dtype="float32", frames=30 * RATE)  # both voices
    sf.write(root / "meetings" / "one_mix.wav", np.stack([mix, mix], axis=1), RATE, subtype="PCM_16")
    return {"calls/support_call.flac": flac_turns, "calls/phone_call.wav": phone_turns}


def write_long_call(root: pathlib.Path) -> list[CallTurn]:
    """`calls/long_call.flac` under `root`: the turns of three sample dialogues as one two-channel call (~73 s)."""
    samples, turns = call_of(LONG_CALL)
    (root / "calls").mkdir(parents=True, exist_ok=True)
    sf.write(root / "calls" / "long_call.flac", samples, RATE, subtype="PCM_16")
    return turns
