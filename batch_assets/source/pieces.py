"""What the GPU step's flights are made of, as `flight_audio.py` reads them: a unit as listed, a plan row (a unit or
one window of a long unit), and how each decoded (its samples' place, or the class and reason it has none; how its
channels were read). No Dagster.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from batch_assets.long_units.windows import piece_id
from batch_assets.schema.results import ResultClass, truncation
from batch_assets.source.channels import MIX, ChannelReading
from batch_assets.source.fetch import ChangedSinceListed, FetchError
from batch_assets.source.identity import ObjectVersion

# Decoded longer than listed by more than this is worth a reason (containers round their durations)
LENGTH_TOLERANCE_S = 1.0


@dataclasses.dataclass(frozen=True)
class UnitSource:
    """A unit as listed: where its object is and what it was (size, version, duration)."""

    unit_id: str
    source_uri: str
    relative_key: str
    listed: ObjectVersion
    duration_s: float
    estimated: bool = False  # the container stated no exact length: `duration_s` is the listing's estimate
    channels: int = 1  # as listed (the header's)
    mode: str = MIX  # how its channels are to be read (`source/channels.py`), and what chose it
    mode_source: str = "setting"


@dataclasses.dataclass(frozen=True)
class PlannedPiece:
    """A plan row of a flight: a unit, or one window of a windowed unit."""

    unit_id: str
    window: int | None = None
    windows: int = 1  # the unit's planned windows
    planned_s: float = 0.0  # the window's planned seconds (a whole unit: its listed duration)

    @property
    def piece(self) -> str:
        return piece_id(self.unit_id, self.window)


@dataclasses.dataclass(frozen=True)
class DecodedPiece:
    """How one piece of a flight decoded: its samples' place in the flight's audio, or why it has none."""

    offset_samples: int = 0
    num_samples: int = 0
    problem: tuple[ResultClass, str] | None = None  # not decoded: its class and reason
    note: str = ""  # decoded, not as listed: why (a truncation, or longer than listed)
    truncated: bool = False
    sha256: str | None = None  # of the object (a windowed unit: on each window)
    bytes_read: int = 0
    reading: ChannelReading | None = None  # how its channels were read: by channel, the flight's audio holds each
    # channel's `num_samples` one after another from `offset_samples`


@dataclasses.dataclass
class FlightAudio:
    """A flight's decoded audio and how each of its pieces decoded."""

    flight_id: str
    audio: np.ndarray
    pieces: dict[str, DecodedPiece]

    @property
    def bytes_read(self) -> int:
        return sum(p.bytes_read for p in self.pieces.values())


def length_note(listed_s: float, decoded_s: float, estimated: bool = False, stopped: str = "") -> tuple[str, bool]:
    """(reason, truncated) for a unit that decoded to `decoded_s` of `listed_s` listed (`estimated`: the listing
    only estimated it, so a difference says nothing about the object; `stopped`: the decoder gave up part-way)."""
    if estimated:
        if stopped:
            return f"truncated: {stopped}; decoded {decoded_s:.1f} s of about {listed_s:.1f} s estimated", True
        return "", False
    if reason := truncation(listed_s, decoded_s):
        return reason + (f" ({stopped})" if stopped else ""), True
    if stopped:
        return f"{stopped}; decoded {decoded_s:.1f} s of {listed_s:.1f} s listed", False
    if decoded_s - listed_s > LENGTH_TOLERANCE_S:
        return f"decoded {decoded_s:.1f} s, {listed_s:.1f} s listed: processed as decoded", False
    return "", False


def failed_piece(error: Exception) -> DecodedPiece:
    cls = {FetchError: ResultClass.FETCH_FAILED, ChangedSinceListed: ResultClass.CHANGED_SINCE_LISTED}.get(
        type(error), ResultClass.UNDECODABLE)
    return DecodedPiece(problem=(cls, str(error)[:500]))
