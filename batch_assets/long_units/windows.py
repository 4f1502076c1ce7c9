"""Long units in windows: cut a recording into overlapped windows, and stitch the windows' results into one unit.

Why: memory and clustering both grow with a recording's length (pyannote clusters all of a file's embeddings at
once: a 2-hour unit peaked at 5.1 GB and split 4 voices into 26 speakers). A unit longer than the window
(`max_unit_seconds` of `prepared_flights`, default 1800 s) is decoded straight into windows of that length,
each overlapping the next by `window_overlap_seconds` (default 30 s), and each window is a flight of its own:
the GPU section processes, and commits, one window at a time (a kill in hour 5 resumes from the last committed
window), holding a window's audio and the next one being prepared. A unit no longer than the window is not
windowed at all: its rows are exactly what they were before windows existed.

The assembly stitches each windowed unit back into one unit (`stitching.py`), linking the windows' speakers
(`link_speakers`, here): their centroid embeddings are clustered across windows, so a voice keeps one label for the
whole recording (and the speakers pyannote split one voice into inside a long window become one again). No Dagster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import numpy as np
import polars as pl

from batch_assets.ingest.speaker_hints import NO_HINTS, SpeakerHints
from batch_assets.source.containers import DecodeError

MAX_RECORDING_SECONDS = 172800.0  # a safety limit only (48 h): longer units are classed too_long
WINDOW_SECONDS = 1800.0
WINDOW_OVERLAP_SECONDS = 30.0
MIN_OVERLAP_S = 10.0  # the segmentation's chunk (community-1: 10 s; builtin: 5 s): the cores' chunks tile the unit
# Windows' speakers closer than this (euclidean, between length-normalised centroids) are one voice. The scale of
# pyannote's own agglomerative step on normalised embeddings (its VBx initialisation: 0.5 builtin, 0.6 community-1).
LINK_THRESHOLD = 0.7
SAMPLE_RATE = 16_000


@dataclasses.dataclass(frozen=True)
class WindowSpec:
    """Window length and overlap, in whole seconds (so every window starts on the segmentation's chunk grid)."""

    seconds: float = WINDOW_SECONDS
    overlap_s: float = WINDOW_OVERLAP_SECONDS

    def __post_init__(self) -> None:
        if self.seconds != int(self.seconds) or self.overlap_s != int(self.overlap_s):
            raise ValueError(f"max_unit_seconds ({self.seconds}) and window_overlap_seconds ({self.overlap_s}) must be "
                             "whole seconds")
        if not MIN_OVERLAP_S <= self.overlap_s <= self.seconds / 4 or self.seconds < 60:
            raise ValueError(f"windows of {self.seconds:.0f} s overlapped by {self.overlap_s:.0f} s: max_unit_seconds "
                             f"must be at least 60, and window_overlap_seconds at least {MIN_OVERLAP_S:.0f} (a "
                             "segmentation chunk) and at most a quarter of it")

    @property
    def stride_s(self) -> float:
        return self.seconds - self.overlap_s

    def windowed(self, duration_s: float | None) -> bool:
        """Whether a unit of this (declared) length is processed in windows."""
        return duration_s is not None and duration_s > self.seconds


def piece_id(unit_id: str, window: int | None) -> str:
    """The id the GPU section processes and commits a plan row under: the unit's, or its window's."""
    return unit_id if window is None else f"{unit_id}.w{window:04d}"


def split_windows(pieces: Iterable[np.ndarray], spec: WindowSpec) -> Iterator[tuple[float, np.ndarray]]:
    """(start_s, samples) of each window of a decoded stream, holding one window at a time. The last window holds
    what is left (it always has samples no earlier window had); a stream no longer than a window is one window.
    Pieces of several columns ((frames, columns): a mix and its channels) are cut into windows of as many."""
    size, stride = int(spec.seconds * SAMPLE_RATE), int(spec.stride_s * SAMPLE_RATE)
    window, fill, start, emitted = None, 0, 0, False
    for piece in pieces:
        if window is None:  # the first piece says how many columns
            window = np.empty((size, *piece.shape[1:]), dtype=np.float32)
        elif window.shape[1:] != piece.shape[1:]:
            raise DecodeError(f"the stream changed from {window.shape[1:]} to {piece.shape[1:]} columns part-way")
        while len(piece):
            take = min(len(piece), size - fill)
            window[fill : fill + take], fill, piece = piece[:take], fill + take, piece[take:]
            if fill == size:
                yield start / SAMPLE_RATE, window.copy()
                window[: size - stride] = window[stride:]
                fill, start, emitted = size - stride, start + stride, True
    if window is not None and fill > (size - stride if emitted else 0):
        yield start / SAMPLE_RATE, window[:fill].copy()


def planned_windows(duration_s: float, spec: WindowSpec) -> list[tuple[float, int]]:
    """(start_s, samples) of each window `split_windows` cuts from a stream of `duration_s` at 16 kHz: how the plan
    lays out a listed unit's windows before anything is decoded."""
    total, size = round(duration_s * SAMPLE_RATE), int(spec.seconds * SAMPLE_RATE)
    stride = int(spec.stride_s * SAMPLE_RATE)
    out, start = [], 0
    while start + size <= total:
        out.append((start / SAMPLE_RATE, size))
        start += stride
    if total - start > (size - stride if out else 0):
        out.append((start / SAMPLE_RATE, total - start))
    return out


def planned_spec(window_samples: int, second_start_s: float) -> WindowSpec:
    """The spec a plan laid a unit's windows out with: its first window's length and its second window's start."""
    seconds = window_samples / SAMPLE_RATE
    return WindowSpec(seconds, seconds - second_start_s)


@dataclasses.dataclass(frozen=True)
class Window:
    """One window of a unit, as the plan gives it: its piece id, where it starts in the unit, how long it is."""

    piece: str
    index: int
    start_s: float
    duration_s: float
    flight_id: str


def cores(windows: list[Window]) -> list[tuple[float, float]]:
    """Each window's core on the unit's clock: from the middle of its overlap with the previous window to the middle
    of its overlap with the next (the first from its start, the last to its end)."""
    bounds = []
    for i, w in enumerate(windows):
        lo = w.start_s if i == 0 else (w.start_s + windows[i - 1].start_s + windows[i - 1].duration_s) / 2
        hi = (w.start_s + w.duration_s if i == len(windows) - 1
              else (windows[i + 1].start_s + w.start_s + w.duration_s) / 2)
        bounds.append((lo, hi))
    return bounds


def windows_by_unit(plan: pl.DataFrame) -> dict[str, list[Window]]:
    """The windowed units of a flight plan, each with its windows in order."""
    out: dict[str, list[Window]] = {}
    for row in (plan.filter(pl.col("window").is_not_null()).sort("unit_id", "window", maintain_order=True)
                .iter_rows(named=True)):
        out.setdefault(row["unit_id"], []).append(Window(piece_id(row["unit_id"], row["window"]), row["window"],
                                                         row["window_start_s"], row["duration_s"], row["flight_id"]))
    return out


def window_pieces(plan: pl.DataFrame) -> set[str]:
    """The piece ids of every window in a flight plan."""
    return {w.piece for windows in windows_by_unit(plan).values() for w in windows}


# -- linking ---------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Cluster:
    members: list[tuple[int, str]]
    total: np.ndarray  # speech-weighted sum of the members' centroids
    weight: float

    def direction(self) -> np.ndarray:
        centroid = self.total / max(self.weight, 1e-9)
        return centroid / max(float(np.linalg.norm(centroid)), 1e-12)


def link_speakers(speakers: list[tuple[int, str, np.ndarray | None, float]], threshold: float = LINK_THRESHOLD,
                  hints: SpeakerHints = NO_HINTS) -> dict[tuple[int, str], int]:
    """{(window, local label): voice} for the windows' speakers `(window, label, centroid, speech_s)`.

    Agglomerative, centroid linkage on length-normalised centroids weighted by speech: the closest two clusters
    merge while they are closer than `threshold`. Two speakers of one window may merge too: pyannote's VBx splits a
    long window's voice into several speakers with all but identical centroids (the builtin models: 15 speakers for
    4 voices in a 30-minute window, their centroids 0.01-0.12 apart against 0.95 and more between voices), and only
    merging them gives the voice one label. Hints bound the count: merging goes on past the threshold while there
    are more voices than `num_speakers`/`max_speakers`, and stops at `num_speakers`/`min_speakers`. A speaker
    without an embedding stays a voice of its own. Voices are numbered in the order of `speakers`.
    """
    clusters = [_Cluster([(w, label)], np.asarray(c, dtype=np.float64) * max(s, 1e-3), max(s, 1e-3))
                for w, label, c, s in speakers if c is not None]
    alone = [(w, label) for w, label, c, _ in speakers if c is None]
    most, least = hints.most, hints.least
    while len(clusters) > least:
        directions = np.stack([c.direction() for c in clusters])
        distance = np.linalg.norm(directions[:, None] - directions[None], axis=-1)
        distance[np.tril_indices(len(clusters))] = np.inf
        i, j = np.unravel_index(int(np.argmin(distance)), distance.shape)
        if distance[i, j] > threshold and not (most and len(clusters) > most):
            break
        a, b = clusters[i], clusters.pop(j)
        a.members += b.members
        a.total, a.weight = a.total + b.total, a.weight + b.weight
    voice = {member: number for number, c in enumerate(clusters) for member in c.members}
    voice |= {member: len(clusters) + i for i, member in enumerate(alone)}
    return voice


def window_hints(hints: SpeakerHints) -> SpeakerHints:
    """What one window's diarization is told: at most the unit's voices (a window may hold fewer than the unit)."""
    return SpeakerHints(max_speakers=hints.most) if hints.most else NO_HINTS


# -- stitching -------------------------------------------------------------------------------------------------------


def link_unit_speakers(speakers: list[tuple[int, str, np.ndarray | None, float]], threshold: float = LINK_THRESHOLD,
                       hints: SpeakerHints = NO_HINTS, solo: set[str] | None = None,
                       ) -> tuple[dict[tuple[int, str], int], dict[int, str]]:
    """({(window, label): voice}, {voice: its name, where it has one}): `link_speakers`, or for a unit read channel
    by channel (`gpu/section/channels.py`; `solo`: its one-party channels' speakers, None for a unit read as one
    signal) its channels' speakers: a one-party channel's speaker is one voice in every window, under its name; the
    speakers of a channel diarized within itself (`{channel speaker}_SPEAKER_NN`) are linked across windows within
    their channel (told the unit's hints less the one-party speakers: `SpeakerHints.less`), and named
    `{channel speaker}_SPEAKER_NN` in the order of `speakers`."""
    if solo is None:
        return link_speakers(speakers, threshold, hints), {}
    voice: dict[tuple[int, str], int] = {}
    names: dict[int, str] = {}
    number = {label: i for i, label in enumerate(sorted(solo))}
    voice |= {(w, label): number[label] for w, label, _, _ in speakers if label in solo}
    names |= {i: label for label, i in number.items()}
    channels: dict[str, list] = {}
    for speaker in speakers:
        if speaker[1] not in solo:
            channels.setdefault(speaker[1].rsplit("_SPEAKER_", 1)[0], []).append(speaker)
    for channel, members in channels.items():
        linked = link_speakers(members, threshold, hints.less(len(solo), shared=len(channels) > 1))
        first = len(names)
        voice |= {member: first + number for member, number in linked.items()}
        names |= {first + number: f"{channel}_SPEAKER_{number:02d}" for number in set(linked.values())}
    return voice, names

