"""What happens to one flight inside the GPU section: VAD -> language -> diarization -> ASR -> speaker attribution.

Each unit is processed on its own slice of the flight's audio; a unit read channel by channel (`channels.py`) as a
piece per channel, merged back into the unit before its commit. A unit with no speech is `silent` and
gets no words, by construction. A unit with speech gets its language: declared (sidecar, run config) or
detected (`gpu/section/routing.py`, `gpu/asr/language_id.py`); a language the routing has no ASR model for makes it
`unsupported_language` (no diarization, no words). ASR runs once per ASR model among the flight's units, each
model loaded on first need. An exception in one unit marks that unit `failed` with the reason and the flight
goes on: one bad unit never fails a partition. Device faults (CUDA errors, device out-of-memory, NCCL:
`gpu/device/faults.py`) and decoder-mode mismatches are not unit failures: they propagate (`DeviceFault`,
`DecoderModeError`), and the caller quarantines the worker.

A flight is two phases. `device_work` does everything that uses the device: VAD, language identification, the
diarization forwards (segmentation, embeddings) and ASR. `host_work` does the rest: with lever 5 or 6 on, the
diarization calls (clustering and reconstruction over the precomputed forwards), and always each word's speaker.
Every stage's seconds are split into device work (model forwards) and host work (`stats.py`). Lever 5
batches the forwards across the flight's units; lever 6 (`runner.run_section`) runs `host_work` outside the device
lock, overlapped with the next flight's `device_work`.

Each stage is one call into the room that does it: VAD `diarization/vad.py: vad_flight`, language
`routing.resolve_languages`, the diarization forwards `diarization/precompute.py: precompute_units` (levers 5, 6)
and the calls `diarization/pipeline.py: diarize_units`, ASR `asr_flight.transcribe_flight` per model. VAD and
diarization (pyannote's room, which knows no outcome) return each unit's result or the reason it failed, and this
module books them into the outcomes and stats; the language and ASR stages write their units' outcomes themselves.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import numpy as np

from batch_assets.gpu.asr.transcribe import Word
from batch_assets.gpu.device.precision import matmul_precision
from batch_assets.gpu.diarization.pipeline import (
    DiarizationCall,
    DiarizationResult,
    UnitDiarization,
    diarization_file,
    diarize_units,
)
from batch_assets.gpu.diarization.precompute import precompute_units
from batch_assets.gpu.diarization.vad import FlightVad, VadResult, vad_flight
from batch_assets.gpu.section.asr_flight import transcribe_flight
from batch_assets.gpu.section.attribution import attribute_speakers
from batch_assets.gpu.section.channels import Separated, channel_diarization, channel_piece, merge, without_bleed
from batch_assets.gpu.section.levers import Levers
from batch_assets.gpu.section.loaded import LoadedModels
from batch_assets.gpu.section.routing import resolve_languages
from batch_assets.gpu.section.stats import SectionStats
from batch_assets.ingest.speaker_hints import NO_HINTS, SpeakerHints
from batch_assets.ingest.unit_channels import MIXED_DOWN, UnitChannels
from batch_assets.ingest.unit_language import DETECT, DeclaredLanguage
from batch_assets.long_units.windows import piece_id
from batch_assets.schema.results import SILENT_REASON, ResultClass
from batch_assets.source.channels import ChannelReading
from batch_assets.source.pieces import DecodedPiece

SAMPLE_RATE = 16_000


@dataclasses.dataclass(frozen=True)
class SectionUnit:
    """One unit of a flight to process, from its `prepared_flights` plan row (result_class ok): where its samples lie
    in the flight's audio, its window when it is one window of a long unit, its speaker-count hints and its declared
    language (DETECT: none)."""

    unit_id: str
    offset_samples: int
    num_samples: int
    window: int | None = None
    speaker_hints: SpeakerHints = NO_HINTS
    language: DeclaredLanguage = DETECT
    channels: UnitChannels = MIXED_DOWN  # how its channels are read (a mode; the channels' speakers)


@dataclasses.dataclass
class UnitOutcome:
    unit_id: str
    flight_id: str
    duration_s: float
    result_class: ResultClass
    reason: str = ""
    vad: VadResult | None = None
    diarization: DiarizationResult | None = None
    words: list[tuple[Word, str | None]] = dataclasses.field(default_factory=list)
    language: str | None = None  # ISO 639-1 (or the LID model's label); None: no speech, or no language known
    language_source: str | None = None  # sidecar, run_config or detected
    language_confidence: float | None = None  # the LID model's probability (detected only)
    asr_model: str | None = None  # the ASR model the routing gave the unit's language
    sha256: str | None = None  # of the unit's object, as the step read it
    channel_reading: ChannelReading | None = None  # how its channels were read (`source/channels.py`)
    channel_of: dict[str, int] = dataclasses.field(default_factory=dict)  # read by channel: each speaker's channel
    solo_speakers: set[str] = dataclasses.field(default_factory=set)  # read by channel: one-party channels' speakers
    channel_languages: list[tuple[str | None, str | None]] = dataclasses.field(default_factory=list)  # read by
    # channel: each channel's language and its source (its commit records each one's ASR model)


@dataclasses.dataclass
class DeviceDone:
    """A flight after its device work: what its host work needs."""

    flight_id: str
    outcomes: dict[str, UnitOutcome]
    words: list[Word] = dataclasses.field(default_factory=list)
    # units whose diarization call is still to run, its forwards done: (call, file, hints)
    calls: dict[str, tuple[DiarizationCall, dict, SpeakerHints]] = dataclasses.field(default_factory=dict)
    decoded: dict[str, DecodedPiece] = dataclasses.field(default_factory=dict)  # how each piece decoded
    separated: dict[str, Separated] = dataclasses.field(default_factory=dict)  # units read channel by channel


def process_flight(models: LoadedModels, flight_id: str, audio: np.ndarray, units: list[SectionUnit], levers: Levers,
                   stats: SectionStats) -> list[UnitOutcome]:
    """`levers`: the run's `levers.Levers`. A window's outcome is under its piece id (`windows.piece_id`), on the
    window's clock; the assembly stitches them."""
    return host_work(models, device_work(models, flight_id, audio, units, levers, stats), stats)


def device_work(models: LoadedModels, flight_id: str, audio: np.ndarray, units: list[SectionUnit], levers: Levers,
                stats: SectionStats, decoded: dict[str, DecodedPiece] | None = None) -> DeviceDone:
    """Everything of a flight that uses the device. With lever 5 or 6 the diarization calls' forwards are done
    here and the calls themselves are left to `host_work`; otherwise each call runs whole here. `decoded`: how each
    piece decoded (`source/flight_audio.py`): its samples' place in `audio` (the plan's otherwise), or the class and
    reason it has no samples."""
    outcomes: dict[str, UnitOutcome] = {}
    waveforms: dict[str, np.ndarray] = {}
    hints: dict[str, SpeakerHints] = {}
    declared: dict[str, DeclaredLanguage] = {}
    decoded, separated = decoded or {}, {}
    for unit in units:
        uid = piece_id(unit.unit_id, unit.window)  # a window of a long unit is processed as a unit of its own
        if (piece := decoded.get(uid)) is not None:
            if piece.problem is not None:
                outcomes[uid] = UnitOutcome(uid, flight_id, 0.0, *piece.problem, sha256=piece.sha256)
                continue
            unit = dataclasses.replace(unit, offset_samples=piece.offset_samples, num_samples=piece.num_samples)
        outcomes[uid] = UnitOutcome(uid, flight_id, unit.num_samples / SAMPLE_RATE, ResultClass.TRANSCRIBED)
        if unit.language.error:  # a sidecar's bad language code: this unit fails, nothing else is affected
            outcomes[uid].result_class, outcomes[uid].reason = ResultClass.FAILED, unit.language.error[:500]
            continue
        if piece is not None and piece.reading is not None and piece.reading.separate:  # each channel a piece
            separated[uid] = _separate(uid, unit, piece.reading)
            for channel, sub in enumerate(separated[uid].pieces):
                outcomes[sub] = UnitOutcome(sub, flight_id, unit.num_samples / SAMPLE_RATE, ResultClass.TRANSCRIBED)
                start = unit.offset_samples + channel * unit.num_samples
                waveforms[sub] = audio[start : start + unit.num_samples]
                hints[sub], declared[sub] = separated[uid].hints(channel, unit.speaker_hints), unit.language
            del outcomes[uid]
            continue
        waveforms[uid] = audio[unit.offset_samples : unit.offset_samples + unit.num_samples]
        hints[uid], declared[uid] = unit.speaker_hints, unit.language
    done = DeviceDone(flight_id, outcomes, decoded=decoded, separated=separated)
    # matmul precision where each model runs: pyannote's full float32, the NeMo models' (LID, ASR) `tf32_enabled`
    with matmul_precision(models.device, False):
        found = vad_flight(models.diarization, waveforms, levers.batch_across_units_enabled,
                           models.segmentation_forwards)
    without_bleed(found.results, separated, waveforms)  # a channel's speech is its own, not the other's echo
    vad_speech = _book_vad(found, outcomes, stats)
    with matmul_precision(models.device, levers.tf32_enabled):
        speech = resolve_languages(models, waveforms, outcomes, declared, vad_speech, stats)
    solo = _solo_channels(separated, speech, outcomes)
    diarize = [uid for uid in speech if uid not in solo]
    stats.segmentation_forwards["vad_of_diarized_units"] += sum(found.results[uid].forwards for uid in diarize)
    reuse = levers.vad_segmentation_reuse_enabled
    calls = {uid: DiarizationCall(**levers.embedding_options(), vad_scores=outcomes[uid].vad.scores if reuse else None)
             for uid in diarize}
    files = {uid: diarization_file(waveforms[uid], uid, calls[uid]) for uid in diarize}
    before = models.segmentation_forwards[0]
    with matmul_precision(models.device, False):
        if levers.batch_across_units_enabled or levers.host_overlap_enabled:  # the calls' forwards now, calls later
            forwards = precompute_units(models.diarization, files, levers.batch_across_units_enabled)
            stats.batch_fallbacks += forwards.batch_fallback
            stats.add("diarization", forwards.device_s, forwards.host_s)
            for uid, reason in forwards.failed.items():
                outcomes[uid].result_class, outcomes[uid].reason = ResultClass.FAILED, reason
            done.calls = {uid: (calls[uid], files[uid], hints[uid])
                          for uid in diarize if outcomes[uid].result_class is ResultClass.TRANSCRIBED}
        else:  # each call whole, now
            diarized = diarize_units(models.diarization, {uid: (calls[uid], files[uid], hints[uid]) for uid in diarize})
            _book_diarization(diarized, outcomes, stats)
    stats.segmentation_forwards["diarization"] += models.segmentation_forwards[0] - before

    # ASR's batches hold every unit with speech, whatever its diarization did (with levers 5 and 6 a unit's
    # clustering fails only after ASR); a unit's words do not depend on which others share its batches
    # (`gpu/asr/transcribe.py`: batch invariance). A failed unit's words are dropped (`host_work`).
    by_model: dict[str, list[str]] = collections.defaultdict(list)  # one ASR call per model, units in flight order
    for uid in speech:
        by_model[outcomes[uid].asr_model].append(uid)
    if not by_model:
        stats.decoder_checks_skipped += 1
    for name, model_units in by_model.items():
        done.words.extend(transcribe_flight(models, name, {uid: waveforms[uid] for uid in model_units}, outcomes,
                                            levers, stats))
    return done


def host_work(models: LoadedModels, done: DeviceDone, stats: SectionStats) -> list[UnitOutcome]:
    """A flight's work that needs no device: the diarization calls `device_work` left (clustering and
    reconstruction over precomputed forwards), then each word's speaker. Lever 6 runs it outside the section."""
    outcomes = done.outcomes
    diarized = diarize_units(models.diarization, done.calls)
    _book_diarization(diarized, outcomes, stats)
    stats.host_phase_device_s += sum(unit.device_s for unit in diarized.values())
    started = time.perf_counter()
    by_unit: dict[str, list[Word]] = collections.defaultdict(list)
    for word in done.words:
        by_unit[word.unit_id].append(word)
    for uid, unit_words in by_unit.items():
        outcome = outcomes[uid]
        if outcome.result_class is not ResultClass.TRANSCRIBED:
            continue
        speakers = attribute_speakers(
            np.array([w.start_s for w in unit_words]),
            np.array([w.end_s for w in unit_words]),
            outcome.diarization.exclusive_turns or outcome.diarization.turns,
        )
        outcome.words = list(zip(unit_words, speakers, strict=True))
    stats.add("attribution", 0.0, time.perf_counter() - started)
    owner = {piece: uid for uid, separated in done.separated.items() for piece in separated.pieces}
    order = list(dict.fromkeys(owner.get(key, key) for key in outcomes))  # a unit read by channel in its place
    for uid, separated in done.separated.items():
        outcomes[uid] = merge(UnitOutcome(uid, done.flight_id, 0.0, ResultClass.SILENT), separated, outcomes)
    for uid, piece in done.decoded.items():
        if piece.problem is None and uid in outcomes:
            _book_decoded(outcomes[uid], piece)
    return [outcomes[uid] for uid in order]


def _separate(uid: str, unit: SectionUnit, reading: ChannelReading) -> Separated:
    """How a unit read channel by channel is processed: a piece per channel, its speakers, its diarized channels."""
    return Separated(tuple(channel_piece(uid, c) for c in range(reading.channels)),
                     tuple(unit.channels.speaker(c) for c in range(reading.channels)),
                     frozenset(unit.channels.diarized))


def _solo_channels(separated: dict[str, Separated], speech: list[str], outcomes: dict[str, UnitOutcome]) -> set[str]:
    """The channel pieces with speech that hold one party: their turns are their speech (not diarized; a channel in a
    language without a model keeps its turns too, its party spoke)."""
    solo = set()
    for unit in separated.values():
        for piece in unit.pieces:
            vad = outcomes[piece].vad
            if vad is not None and vad.regions and (speaker := unit.solo(piece)) is not None:
                outcomes[piece].diarization = channel_diarization(vad.regions, speaker)
                if piece in speech:
                    solo.add(piece)
    return solo


def _book_decoded(outcome: UnitOutcome, piece: DecodedPiece) -> None:
    """What decoding says of a processed unit: its sha256, and a length other than listed (a truncated unit that was
    transcribed or silent is `truncated`)."""
    outcome.sha256 = piece.sha256
    outcome.channel_reading = piece.reading
    if not piece.note:
        return
    if piece.truncated and outcome.result_class in (ResultClass.TRANSCRIBED, ResultClass.SILENT):
        outcome.result_class = ResultClass.TRUNCATED
    outcome.reason = "; ".join(r for r in (piece.note, outcome.reason) if r)


def _book_vad(found: FlightVad, outcomes: dict[str, UnitOutcome], stats: SectionStats) -> list[str]:
    """A flight's VAD into its outcomes and stats; returns the units with speech, in order."""
    stats.batch_fallbacks += found.batch_fallback
    for device_s, host_s in found.seconds:
        stats.add("vad", device_s, host_s)
    for uid, reason in found.failed.items():
        outcomes[uid].result_class, outcomes[uid].reason = ResultClass.FAILED, reason
    speech = []
    for uid, result in ((uid, found.results[uid]) for uid in outcomes if uid in found.results):
        outcomes[uid].vad = result
        if not result.regions:
            outcomes[uid].result_class, outcomes[uid].reason = ResultClass.SILENT, SILENT_REASON
        else:
            speech.append(uid)
    stats.segmentation_forwards["vad"] += found.forwards
    return speech


def _book_diarization(diarized: dict[str, UnitDiarization], outcomes: dict[str, UnitOutcome],
                      stats: SectionStats) -> None:
    """Units' diarization calls into their outcomes and stats."""
    for uid, unit in diarized.items():
        stats.add("diarization", unit.device_s, unit.host_s)
        if unit.result is None:
            outcomes[uid].result_class, outcomes[uid].reason = ResultClass.FAILED, unit.reason
            continue
        outcomes[uid].diarization = unit.result
        stats.segmentation_reuse[unit.result.reuse] += 1
        stats.embedding_work.update(unit.result.embedding_work.counts())
        stats.embedding_paths[unit.result.embedding_work.path] += 1
