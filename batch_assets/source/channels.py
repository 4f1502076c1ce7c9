"""How a unit's channels are read: mixed down to one signal, or channel by channel (each party on its own). No Dagster.

Why: contact centres record each party of a call on its own channel; mixed down, the parties' cross-talk merges
their words and diarization guesses what the channels already say. A unit's mode (`ingest/unit_channels.py`:
sidecar, run config, setting) is `mix`, `separate` (every channel on its own, any count) or `auto`, decided here on
the decoded 16 kHz channels of a two-channel object (`auto` mixes any other count):

- frames of 20 ms; a frame is sound when its loudest channel is within `ACTIVE_RANGE_DB` of the object's loudest
  frame and above `FLOOR_DB` (speech and noise bursts, not silence: a silent stretch says nothing about the parties);
- a channel *leads* a sound frame when it is at least `LEAD_DB` louder than the other;
- read channel by channel when each channel leads at least `LEAD_SHARE` of the sound frames (each party speaks on
  its own channel); else mixed: one mix on both channels (a "stereo" copy of a mono file: no frame led), a stereo
  room microphone (a few dB apart), a recording on one channel only (the other never leads: its party, or parties,
  are diarized from the mix).

The figure (`ChannelReading.lead`: the smaller channel's share) is kept on the unit's row. Nothing here imports a
model.
"""

from __future__ import annotations

import dataclasses

import numpy as np

AUTO, MIX, SEPARATE = "auto", "mix", "separate"
MODES = (AUTO, MIX, SEPARATE)
MIXED, BY_CHANNEL = "mixed", "by_channel"  # `transcripts/units.channel_reading`
FRAME = 320  # 20 ms at 16 kHz
ACTIVE_RANGE_DB = 40.0
FLOOR_DB = -70.0
LEAD_DB = 10.0
LEAD_SHARE = 0.1
MIN_SOUND_FRAMES = 25  # half a second of sound: less says nothing, mixed


@dataclasses.dataclass(frozen=True)
class ChannelReading:
    """How a unit's channels were read: `separate` or mixed, decided by `source` (`auto`, or where the forced mode
    came from: `sidecar`, `run_config`, `setting`; `switch_off`: the kill switch mixed it), on `channels` channels;
    `lead`: `auto`'s figure (None when not measured)."""

    channels: int
    separate: bool
    source: str
    lead: float | None = None

    @property
    def reading(self) -> str:
        return BY_CHANNEL if self.separate else MIXED


def frame_db(channel: np.ndarray) -> np.ndarray:
    """Each whole 20 ms frame's power in dB (full scale 0)."""
    frames = channel[: len(channel) // FRAME * FRAME].reshape(-1, FRAME).astype(np.float64)
    return 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-12)


def lead_share(channels: np.ndarray) -> float:
    """The smaller of the two channels' shares of sound frames it leads (0: one mix, or one channel only)."""
    if channels.shape[0] != 2:
        return 0.0
    left, right = frame_db(channels[0]), frame_db(channels[1])
    loudest = np.maximum(left, right)
    if not len(loudest):
        return 0.0
    sound = loudest > max(float(loudest.max()) - ACTIVE_RANGE_DB, FLOOR_DB)
    if int(sound.sum()) < MIN_SOUND_FRAMES:
        return 0.0
    gap = (left - right)[sound]
    return float(min(np.mean(gap >= LEAD_DB), np.mean(-gap >= LEAD_DB)))


def decide(mode: str, source: str, channels: np.ndarray | None, count: int) -> ChannelReading:
    """How to read a unit in `mode` (from `source`) whose object has `count` channels, given its decoded channels
    (`channels`: (count, samples) at 16 kHz; None when they were not kept)."""
    if count < 2 or mode == MIX or channels is None:
        return ChannelReading(count, False, source)
    if mode == SEPARATE:
        return ChannelReading(count, True, source)
    if count != 2:  # `auto` decides for two channels only
        return ChannelReading(count, False, AUTO)
    lead = lead_share(channels)
    return ChannelReading(count, lead >= LEAD_SHARE, AUTO, round(lead, 4))
