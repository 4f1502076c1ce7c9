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

The figure (`ChannelReading.lead`: the smaller channel's share) is kept on the unit's row. Read by channel, a
channel's speech is what VAD finds on it less where another channel is `LEAD_DB` louder (`own_regions`, levels
averaged over 200 ms): a party's echo or bleed on the other party's channel (line echo, a headset) is not that
channel's speech, while overlapping speech, each party loud on its own channel, stays on both; nor is a stretch less
than `QUIET_DB` above the channel's idle line (`idle_level`: a VAD false alarm on line noise). Nothing here imports
a model.
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
BLEED_SMOOTH = 10  # frames (200 ms) a channel's level is averaged over to tell its own speech from the other's echo
QUIET_DB = 10.0  # a channel's speech is this far above its idle line at least (`idle_level`)


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


def frame_db(channel: np.ndarray, smooth: int = 1) -> np.ndarray:
    """Each whole 20 ms frame's power in dB (full scale 0); `smooth`: averaged over that many frames around it."""
    power = np.empty(len(channel) // FRAME)
    for start in range(0, len(power), 65536):  # in blocks: a window's channel is never copied whole in float64
        block = channel[start * FRAME : min(start + 65536, len(power)) * FRAME].reshape(-1, FRAME).astype(np.float64)
        power[start : start + len(block)] = np.mean(block * block, axis=1)
    if smooth > 1:
        power = np.convolve(power, np.ones(smooth) / smooth, mode="same")
    return 10.0 * np.log10(power + 1e-12)


def own_regions(regions: list[tuple[float, float]], own_db: np.ndarray, other_db: np.ndarray,
                shortest_s: float = 0.1) -> list[tuple[float, float]]:
    """A channel's speech `regions` without the stretches another channel is `LEAD_DB` louder over (its party's
    echo or bleed: a channel's own speech, never quieter than the other side's) and those less than `QUIET_DB` above
    the channel's idle line (a VAD false alarm on line noise), pieces shorter than `shortest_s` dropped. `own_db`,
    `other_db`: the channels' smoothed frame levels (`frame_db`)."""
    n = min(len(own_db), len(other_db))
    own = (other_db[:n] - own_db[:n] < LEAD_DB) & (own_db[:n] >= idle_level(regions, own_db[:n]) + QUIET_DB)
    step, kept = FRAME / 16_000, []
    for start, end in regions:
        first, last = int(start / step), min(int(np.ceil(end / step)), len(own))
        runs = np.flatnonzero(np.diff(np.concatenate([[0], own[first:last].astype(np.int8), [0]])))
        for a, b in zip(runs[::2], runs[1::2], strict=True):
            piece = (float(max(start, (first + a) * step)), float(min(end, (first + b) * step)))
            if piece[1] - piece[0] >= shortest_s:
                kept.append(piece)
    return kept


def idle_level(regions: list[tuple[float, float]], levels: np.ndarray) -> float:
    """A channel's idle line: the median level of its frames outside its VAD `regions` and above `FLOOR_DB` (digital
    silence is no line); -inf (no rule) with less than `MIN_SOUND_FRAMES` of them (a channel all speech)."""
    idle = np.ones(len(levels), dtype=bool)
    for start, end in regions:
        idle[int(start * 16_000 / FRAME) : int(np.ceil(end * 16_000 / FRAME))] = False
    idle &= levels > FLOOR_DB
    return float(np.median(levels[idle])) if int(idle.sum()) >= MIN_SOUND_FRAMES else -np.inf


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
    if count < 2 or mode != AUTO:
        return ChannelReading(count, mode == SEPARATE and count > 1 and channels is not None, source)
    if count != 2 or channels is None:  # `auto` decides for two channels only
        return ChannelReading(count, False, AUTO)
    lead = lead_share(channels)
    return ChannelReading(count, lead >= LEAD_SHARE, AUTO, round(lead, 4))
