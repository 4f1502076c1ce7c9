"""What happens to one flight inside the GPU section: VAD -> language -> diarization -> ASR -> speaker attribution.

Each unit is processed on its own slice of the flight's audio. A unit with no speech is `silent` and
gets no words, by construction. A unit with speech gets its language: declared (sidecar, run config) or
detected (`gpu/routing.py`, `gpu/language_id.py`); a language the routing has no ASR model for makes it
`unsupported_language` (no diarization, no words). ASR runs once per ASR model among the flight's units, each
model loaded on first need. An exception in one unit marks that unit `failed` with the reason and the flight
goes on: one bad unit never fails a partition. Device faults (CUDA errors, device out-of-memory, NCCL:
`gpu/faults.py`) and decoder-mode mismatches are not unit failures: they propagate (`DeviceFault`,
`DecoderModeError`), and the caller quarantines the worker.

A flight is two phases. `device_work` does everything that uses the device: VAD, language identification, the
diarization forwards (segmentation, embeddings) and ASR. `host_work` does the rest: with lever 5 or 6 on, the
diarization calls (clustering and reconstruction over the precomputed forwards), and always each word's speaker.
Every stage's seconds are split into device work (model forwards) and host work (`section_stats.py`). Lever 5
batches the forwards across the flight's units; lever 6 (`runner.run_section`) runs `host_work` outside the device lock,
overlapped with the next flight's `device_work`.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import numpy as np

from batch_assets.gpu.asr import Segment, Word, batch_size_for, speech_segments
from batch_assets.gpu.asr_flight import transcribe_checked
from batch_assets.gpu.attribution import attribute_speakers
from batch_assets.gpu.diarization import (
    DiarizationCall,
    DiarizationResult,
    HostSeconds,
    call_of,
    diarization_file,
    diarize,
    precompute_device_work,
)
from batch_assets.gpu.faults import raise_if_device_fault
from batch_assets.gpu.levers import Levers
from batch_assets.gpu.loaded import LoadedModels
from batch_assets.gpu.precision import asr_encoder_autocast, matmul_precision
from batch_assets.gpu.routing import asr_ready, resolve_languages
from batch_assets.gpu.section_stats import SectionStats
from batch_assets.gpu.vad import VadResult, run_vad, run_vad_flight
from batch_assets.ingest.speaker_hints import NO_HINTS, SpeakerHints
from batch_assets.ingest.unit_language import DETECT, DeclaredLanguage
from batch_assets.long_units.windows import piece_id
from batch_assets.models.languages import UNSPACED
from batch_assets.schema.results import SILENT_REASON, ResultClass

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


@dataclasses.dataclass
class DeviceDone:
    """A flight after its device work: what its host work needs."""

    flight_id: str
    outcomes: dict[str, UnitOutcome]
    words: list[Word] = dataclasses.field(default_factory=list)
    # units whose diarization call is still to run, its forwards done: (call, file, hints)
    calls: dict[str, tuple[DiarizationCall, dict, SpeakerHints]] = dataclasses.field(default_factory=dict)


def process_flight(models: LoadedModels, flight_id: str, audio: np.ndarray, units: list[SectionUnit], levers: Levers,
                   stats: SectionStats) -> list[UnitOutcome]:
    """`levers`: the run's `runner.Levers`. A window's outcome is under its piece id (`windows.piece_id`), on the
    window's clock; the assembly stitches them."""
    return host_work(models, device_work(models, flight_id, audio, units, levers, stats), stats)


def device_work(models: LoadedModels, flight_id: str, audio: np.ndarray, units: list[SectionUnit], levers: Levers,
                stats: SectionStats) -> DeviceDone:
    """Everything of a flight that uses the device. With lever 5 or 6 the diarization calls' forwards are done
    here and the calls themselves are left to `host_work`; otherwise each call runs whole here."""
    outcomes: dict[str, UnitOutcome] = {}
    waveforms: dict[str, np.ndarray] = {}
    hints: dict[str, SpeakerHints] = {}
    declared: dict[str, DeclaredLanguage] = {}
    for unit in units:
        uid = piece_id(unit.unit_id, unit.window)  # a window of a long unit is processed as a unit of its own
        outcomes[uid] = UnitOutcome(uid, flight_id, unit.num_samples / SAMPLE_RATE, ResultClass.TRANSCRIBED)
        if unit.language.error:  # a sidecar's bad language code: this unit fails, nothing else is affected
            outcomes[uid].result_class, outcomes[uid].reason = ResultClass.FAILED, unit.language.error[:500]
            continue
        waveforms[uid] = audio[unit.offset_samples : unit.offset_samples + unit.num_samples]
        hints[uid], declared[uid] = unit.speaker_hints, unit.language
    done = DeviceDone(flight_id, outcomes)
    # matmul precision where each model runs: pyannote's full float32, the NeMo models' (LID, ASR) `tf32_enabled`
    with matmul_precision(models.device, False):
        vad_speech = _vad(models, waveforms, outcomes, levers, stats)
    with matmul_precision(models.device, levers.tf32_enabled):
        speech = resolve_languages(models, waveforms, outcomes, declared, vad_speech, stats)
    reuse = levers.vad_segmentation_reuse_enabled
    calls = {uid: DiarizationCall(**levers.embedding_options(), vad_scores=outcomes[uid].vad.scores if reuse else None)
             for uid in speech}
    files = {uid: diarization_file(waveforms[uid], uid, calls[uid]) for uid in speech}
    before = models.segmentation_forwards[0]
    with matmul_precision(models.device, False):
        if levers.batch_across_units_enabled or levers.host_overlap_enabled:
            _precompute(models, files, levers, stats, outcomes)
            done.calls = {uid: (calls[uid], files[uid], hints[uid])
                          for uid in speech if outcomes[uid].result_class is ResultClass.TRANSCRIBED}
        else:
            for uid in speech:
                _diarize_unit(models, outcomes[uid], calls[uid], files[uid], hints[uid], stats)
    stats.segmentation_forwards["diarization"] += models.segmentation_forwards[0] - before

    # ASR's batches hold every unit with speech, whatever its diarization did: which units share a batch moves the
    # last bits of each one's forward (and so word scores, even a word's end), and with levers 5 and 6 a unit's
    # clustering fails only after ASR. A failed unit's words are dropped (`host_work`).
    by_model: dict[str, list[str]] = collections.defaultdict(list)  # one ASR call per model, units in flight order
    for uid in speech:
        by_model[outcomes[uid].asr_model].append(uid)
    if not by_model:
        stats.decoder_checks_skipped += 1
    for name, model_units in by_model.items():
        segments: list[Segment] = []
        for uid in model_units:
            segments.extend(speech_segments(uid, outcomes[uid].vad.regions, outcomes[uid].duration_s))
        model = asr_ready(models, name, levers.asr_cuda_graphs_enabled, stats)
        unspaced = frozenset(uid for uid in model_units if outcomes[uid].language in UNSPACED)
        started = time.perf_counter()
        with (asr_encoder_autocast(model, models.device, levers.half_precision_enabled),
              matmul_precision(models.device, levers.tf32_enabled)):
            done.words.extend(transcribe_checked(models, model, {uid: waveforms[uid] for uid in model_units},
                                                  segments, outcomes,
                                                  batch_size_for(models.device, levers.asr_batch_size),
                                                  levers.asr_cuda_graphs_enabled, stats, unspaced))
        asr_s = time.perf_counter() - started
        stats.add("asr", asr_s, 0.0)
        stats.asr_seconds_by_model[name] += asr_s
    return done


def host_work(models: LoadedModels, done: DeviceDone, stats: SectionStats) -> list[UnitOutcome]:
    """A flight's work that needs no device: the diarization calls `device_work` left (clustering and
    reconstruction over precomputed forwards), then each word's speaker. Lever 6 runs it outside the section."""
    outcomes = done.outcomes
    for uid, (call, file, hints) in done.calls.items():
        _diarize_unit(models, outcomes[uid], call, file, hints, stats)
        stats.host_phase_device_s += call.device_s
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
    return list(outcomes.values())


def _vad(models: LoadedModels, waveforms: dict[str, np.ndarray], outcomes: dict[str, UnitOutcome], levers: Levers,
         stats: SectionStats) -> list[str]:
    """Every unit's VAD (lever 5: the forwards batched across units); returns the units with speech, in order."""
    forwards = models.segmentation_forwards
    before = forwards[0]
    results: dict[str, VadResult] = {}
    if levers.batch_across_units_enabled and waveforms:
        started = time.perf_counter()
        try:
            results, device_s = run_vad_flight(models.diarization, waveforms)
            stats.add("vad", device_s, time.perf_counter() - started - device_s)
        except Exception as error:  # a unit's audio broke the batch: unit by unit, so that one bad unit stays one
            raise_if_device_fault(error, f"batched VAD of {', '.join(waveforms)}")
            stats.batch_fallbacks += 1
            results = {}
    for uid, waveform in waveforms.items():
        if uid in results:
            continue
        started, unit_before = time.perf_counter(), forwards[0]
        try:
            results[uid] = run_vad(models.diarization, waveform, uid)
            results[uid].forwards = forwards[0] - unit_before
        except Exception as error:  # one unit's failure is that unit's result, unless the device's
            raise_if_device_fault(error, f"VAD of {uid}")
            outcomes[uid].result_class, outcomes[uid].reason = (ResultClass.FAILED,
                                                                f"{type(error).__name__}: {error}"[:500])
            continue
        stats.add("vad", results[uid].device_s, time.perf_counter() - started - results[uid].device_s)
    stats.segmentation_forwards["vad"] += forwards[0] - before
    speech = []
    for uid in waveforms:
        if uid not in results:
            continue
        outcomes[uid].vad = results[uid]
        if not results[uid].regions:
            outcomes[uid].result_class, outcomes[uid].reason = ResultClass.SILENT, SILENT_REASON
        else:
            speech.append(uid)
    stats.segmentation_forwards["vad_of_diarized_units"] += sum(results[uid].forwards for uid in speech)
    return speech


def _precompute(models: LoadedModels, files: dict[str, dict], levers: Levers, stats: SectionStats,
                outcomes: dict[str, UnitOutcome]) -> None:
    """The diarization calls' forwards (lever 5: batched across units); a unit that breaks the batch fails alone.
    The host work done on the way (binarizing, counting speakers) counts as host seconds, also when a batch
    raises part-way and the flight falls back unit by unit."""
    pipeline = models.diarization
    started, host = time.perf_counter(), HostSeconds()
    try:
        precompute_device_work(pipeline, list(files.values()), levers.batch_across_units_enabled, host)
    except Exception as error:
        raise_if_device_fault(error, f"batched diarization forwards of {', '.join(files)}")
        stats.batch_fallbacks += 1
        for uid, file in files.items():
            call = call_of(file)
            call.segmentations = call.embeddings = None
            try:
                precompute_device_work(pipeline, [file], False, host)
            except Exception as unit_error:
                raise_if_device_fault(unit_error, f"diarization forwards of {uid}")
                outcomes[uid].result_class = ResultClass.FAILED
                outcomes[uid].reason = f"{type(unit_error).__name__}: {unit_error}"[:500]
    stats.add("diarization", time.perf_counter() - started - host.seconds, host.seconds)


def _diarize_unit(models: LoadedModels, outcome: UnitOutcome, call: DiarizationCall, file: dict, hints: SpeakerHints,
                  stats: SectionStats) -> bool:
    """One unit's diarization call (whole, or the host part of a precomputed one); False when the unit failed."""
    started = time.perf_counter()
    try:
        outcome.diarization = diarize(models.diarization, None, outcome.unit_id, call=call, file=file, hints=hints)
    except Exception as error:  # one unit's failure is that unit's result, unless the device's
        raise_if_device_fault(error, f"diarization of {outcome.unit_id}")
        outcome.result_class, outcome.reason = ResultClass.FAILED, f"{type(error).__name__}: {error}"[:500]
        return False
    finally:
        stats.add("diarization", call.device_s, time.perf_counter() - started - call.device_s)
    stats.segmentation_reuse[outcome.diarization.reuse] += 1
    stats.embedding_work.update(outcome.diarization.embedding_work.counts())
    stats.embedding_paths[outcome.diarization.embedding_work.path] += 1
    return True
