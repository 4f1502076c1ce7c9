"""A unit read channel by channel (`source/channels.py`): each channel a piece of the flight, merged back into the unit.

Why: each party of a call on its own channel says who spoke; diarization of the mix only guesses it, and cross-talk
merges the parties' words. The section processes each channel of such a unit as a piece of its own
(`{unit}.ch{channel}`): VAD, its regions less another channel's echo (`without_bleed`), language and ASR on it. A
channel that holds one party is not diarized: its speech regions are its speaker's turns (the sidecar's or run's
`channel_speakers`, else `CHANNEL_0`, `CHANNEL_1`, ...); a channel named in `diarized_channels` (a conference
bridge) is diarized within itself, its speakers `{channel speaker}_{label}`, told the unit's speaker-count hints
less the one-party channels (`Separated.hints`). `merge` makes the pieces one unit again, before its commit: the
turns of every channel by start time, overlapping speech kept on both sides; each channel's words cut into runs at
its turns, the runs ordered by start time (a reply that starts before the other party stops follows as a run of its
own; the tables join consecutive runs of one speaker into one segment); the unit's class from its channels' (one
failed channel fails the unit, with the reason; else transcribed if any channel is); its language that of the
transcribed channel with the most speech (another channel's in the reason), each channel's kept for its commit's
identity (`channel_languages`). No Dagster.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from batch_assets.gpu.diarization.pipeline import DiarizationResult
from batch_assets.gpu.diarization.vad import VadResult
from batch_assets.gpu.section.attribution import attribute_speakers
from batch_assets.ingest.speaker_hints import NO_HINTS, SpeakerHints
from batch_assets.schema.results import SILENT_REASON, ResultClass
from batch_assets.source.channels import BLEED_SMOOTH, frame_db, own_regions

CHANNEL_REUSE = "channel"  # `diarization/speakers.segmentation` of a channel's speaker: its speech, not diarized


def channel_piece(unit_piece: str, channel: int) -> str:
    return f"{unit_piece}.ch{channel}"


@dataclasses.dataclass(frozen=True)
class Separated:
    """A unit read channel by channel in this flight: its channel pieces (in channel order), each channel's speaker
    name and the channels diarized within themselves."""

    pieces: tuple[str, ...]
    speakers: tuple[str, ...]
    diarized: frozenset[int] = frozenset()

    def hints(self, channel: int, hints: SpeakerHints) -> SpeakerHints:
        """A diarized channel's speaker-count hints: the unit's, less its one-party channels (`SpeakerHints.less`)."""
        if channel not in self.diarized:
            return NO_HINTS
        diarized = [c for c in range(len(self.pieces)) if c in self.diarized]
        return hints.less(len(self.pieces) - len(diarized), shared=len(diarized) > 1)

    def solo(self, piece: str) -> str | None:
        """The speaker of a one-party channel piece (None: a diarized channel)."""
        channel = self.pieces.index(piece)
        return None if channel in self.diarized else self.speakers[channel]


def without_bleed(results: dict, separated: dict[str, Separated], waveforms: dict[str, np.ndarray]) -> None:
    """Each channel piece's VAD regions (`results`, VadResult by piece) less the stretches another channel of its unit
    is louder over (`source/channels.py: own_regions`): its own speech, before language, ASR and its turns."""
    for unit in separated.values():
        levels = [frame_db(waveforms[piece], BLEED_SMOOTH) for piece in unit.pieces]
        for channel, piece in enumerate(unit.pieces):
            if piece in results and len(levels) > 1:
                other = np.max([lv for c, lv in enumerate(levels) if c != channel], axis=0)
                results[piece].regions = own_regions(results[piece].regions, levels[channel], other)


def channel_diarization(regions: list[tuple[float, float]], speaker: str) -> DiarizationResult:
    """A one-party channel's turns: its speech regions, its speaker's (nothing is diarized)."""
    turns = [(float(s), float(e), speaker) for s, e in regions]
    return DiarizationResult(turns, list(turns), {}, CHANNEL_REUSE)


def _label(speaker: str, label: str) -> str:
    """A diarized channel's speaker: its local label under the channel's speaker name."""
    return f"{speaker}_{label}"


def _named(result: DiarizationResult, speaker: str) -> DiarizationResult:
    """A diarized channel's result with its labels under the channel's speaker name."""
    return dataclasses.replace(result, turns=[(s, e, _label(speaker, lab)) for s, e, lab in result.turns],
                               exclusive_turns=[(s, e, _label(speaker, lab)) for s, e, lab in result.exclusive_turns],
                               embeddings={_label(speaker, lab): v for lab, v in result.embeddings.items()})


def _segments(words: list, turns: list[tuple[float, float, str]], channel: int) -> list[tuple[float, int, list]]:
    """(start, channel, words) of each run of a channel's words within one turn."""
    if not words:
        return []
    order = sorted(words, key=lambda pair: pair[0].start_s)
    index = attribute_speakers(np.array([w.start_s for w, _ in order]), np.array([w.end_s for w, _ in order]),
                               [(s, e, str(i)) for i, (s, e, _) in enumerate(turns)])
    runs = itertools.groupby(zip(order, index, strict=True), key=lambda pair_turn: (pair_turn[1], pair_turn[0][1]))
    return [(run[0][0].start_s, channel, run) for run in ([pair for pair, _ in grouped] for _, grouped in runs)]


def merge(merged, separated: Separated, outcomes: dict):
    """`merged` (the unit's `flight.UnitOutcome`, fresh) made the unit's outcome from its channel pieces' (`outcomes`,
    keyed by piece; they are removed from it)."""
    parts = [outcomes.pop(piece) for piece in separated.pieces]
    merged.duration_s = max(p.duration_s for p in parts)
    merged.result_class, merged.reason = ResultClass.SILENT, SILENT_REASON
    notes = [f"channel {c}: {p.reason}" for c, p in enumerate(parts)
             if p.reason and p.result_class is not ResultClass.SILENT]
    classes = [p.result_class for p in parts]
    if ResultClass.FAILED in classes:
        merged.result_class = ResultClass.FAILED
    elif ResultClass.TRANSCRIBED in classes:
        merged.result_class = ResultClass.TRANSCRIBED
    elif any(c is not ResultClass.SILENT for c in classes):
        merged.result_class = next(c for c in classes if c is not ResultClass.SILENT)
    if merged.result_class is not ResultClass.SILENT:
        merged.reason = "; ".join(notes)
    if all(p.vad is not None for p in parts):
        merged.vad = _merged_vad([p.vad for p in parts])
    turns, exclusive, embeddings, segments = [], [], {}, []
    for channel, part in enumerate(parts):
        if part.diarization is None:
            continue
        speaker = separated.speakers[channel]
        result = part.diarization if channel not in separated.diarized else _named(part.diarization, speaker)
        merged.channel_of.update({label: channel for _, _, label in result.turns})
        merged.solo_speakers.update(() if channel in separated.diarized else {lab for _, _, lab in result.turns})
        turns.extend(result.turns)
        exclusive.extend(result.exclusive_turns)
        embeddings.update(result.embeddings)
        words = part.words if channel not in separated.diarized else [(w, _label(speaker, s)) for w, s in part.words]
        segments.extend(_segments(words, result.exclusive_turns or result.turns, channel))
        if merged.diarization is None or result.reuse != CHANNEL_REUSE:
            merged.diarization = dataclasses.replace(result, turns=[], exclusive_turns=[], embeddings={})
    if merged.diarization is not None:
        merged.diarization.turns = sorted(turns)
        merged.diarization.exclusive_turns = sorted(exclusive)
        merged.diarization.embeddings = embeddings
    merged.words = [pair for _, _, run in sorted(segments, key=lambda s: (s[0], s[1])) for pair in run]
    merged.channel_languages = [(p.language, p.language_source) for p in parts]
    heard = [p for p in parts if p.result_class is ResultClass.TRANSCRIBED and p.language is not None]
    spoken = heard or [p for p in parts if p.language is not None]  # the unit's language: a transcribed channel's
    if spoken:
        lead = max(spoken, key=lambda p: p.vad.speech_s if p.vad else 0.0)
        for key in ("language", "language_source", "language_confidence", "asr_model"):
            setattr(merged, key, getattr(lead, key))
        other = [f"channel {c}: {p.language}" for c, p in enumerate(parts)
                 if p in spoken and p.language != lead.language]
        merged.reason = "; ".join(r for r in (merged.reason, *other) if r)
    return merged


def _merged_vad(parts: list[VadResult]) -> VadResult:
    """One VAD result of a unit's channels: the union of their speech regions; their scores side by side (each
    channel's local speakers, channel after channel: `vad_scores/units.local_speakers` counts them all)."""
    first = parts[0].scores
    chunks = min(p.scores.data.shape[0] for p in parts)
    scores = type(first)(np.concatenate([p.scores.data[:chunks] for p in parts], axis=-1), first.sliding_window)
    regions: list[list[float]] = []
    for start, end in sorted(r for p in parts for r in p.regions):
        if regions and start <= regions[-1][1]:
            regions[-1][1] = max(regions[-1][1], end)
        else:
            regions.append([start, end])
    return VadResult(scores, [(s, e) for s, e in regions], sum(p.device_s for p in parts),
                     sum(p.forwards for p in parts))
