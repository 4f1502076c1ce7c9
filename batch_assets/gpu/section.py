"""What happens to one flight inside the GPU section: VAD -> diarization -> ASR -> speaker attribution.

Each unit is processed on its own slice of the flight's audio. A unit with no speech is `silent` and
gets no words, by construction. An exception in one unit marks that unit `failed` with the reason and
the flight goes on: one bad unit never fails a partition. Device faults (CUDA errors, device
out-of-memory, NCCL: `gpu/faults.py`) and decoder-mode mismatches are not unit failures: they propagate
(`DeviceFault`, `DecoderModeError`), and the caller quarantines the worker.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import numpy as np

from batch_assets.gpu.asr import DecoderModeError, Segment, Word, check_decoder_mode, speech_segments, transcribe_segments
from batch_assets.gpu.attribution import attribute_speakers
from batch_assets.gpu.diarization import DiarizationResult, diarize
from batch_assets.gpu.faults import free_device_cache, out_of_memory, raise_if_device_fault
from batch_assets.gpu.vad import VadResult, run_vad
from batch_assets.results import ResultClass
from batch_assets.speaker_hints import NO_HINTS
from batch_assets.windows import piece_id

SAMPLE_RATE = 16_000


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


@dataclasses.dataclass
class SectionStats:
    seconds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    decoder_modes: set = dataclasses.field(default_factory=set)
    segmentation_reuse: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # segmentation model forwards: by VAD (all units, and units that went on to diarization), by diarization
    segmentation_forwards: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # embedding work summed over diarized units (chunks, pairs, active_pairs, trunk_forwards, pooled_pairs)
    embedding_work: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    embedding_paths: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    asr_batch_retries: int = 0  # flights whose batched ASR failed and were retried unit by unit
    # flights with no speech to transcribe: no ASR call ran, so there is no decoder to check (NeMo builds and
    # captures its CUDA graphs lazily, on the first decode: demanding a captured graph would fail them)
    decoder_checks_skipped: int = 0


def _timed(stats: SectionStats, stage: str):
    class _Timer:
        def __enter__(self):
            self.started = time.perf_counter()

        def __exit__(self, *exc):
            stats.seconds[stage] += time.perf_counter() - self.started
            return False

    return _Timer()


def process_flight(
    models,
    flight_id: str,
    audio: np.ndarray,
    units: list[dict],
    levers,
    stats: SectionStats,
) -> list[UnitOutcome]:
    """`units`: plan rows of this flight with result_class ok (unit_id, offset_samples, num_samples, a window's
    `window`, and optionally `speaker_hints`, a `SpeakerHints`); `levers`: the run's `runner.Levers`. A window's
    outcome is under its piece id (`windows.piece_id`), on the window's clock; the assembly stitches them."""
    cuda_graphs, asr_batch_size = levers.asr_cuda_graphs_enabled, levers.asr_batch_size
    outcomes: dict[str, UnitOutcome] = {}
    waveforms: dict[str, np.ndarray] = {}
    for unit in units:
        uid = piece_id(unit["unit_id"], unit.get("window"))  # a window of a long unit is processed as a unit of its own
        waveform = audio[unit["offset_samples"] : unit["offset_samples"] + unit["num_samples"]]
        outcome = UnitOutcome(uid, flight_id, len(waveform) / SAMPLE_RATE, ResultClass.TRANSCRIBED)
        outcomes[uid] = outcome
        forwards = models.segmentation_forwards
        try:
            before = forwards[0]
            with _timed(stats, "vad"):
                outcome.vad = run_vad(models.diarization, waveform, uid)
            vad_forwards = forwards[0] - before
            stats.segmentation_forwards["vad"] += vad_forwards
            if not outcome.vad.regions:
                outcome.result_class, outcome.reason = ResultClass.SILENT, "no speech detected by VAD"
                continue
            stats.segmentation_forwards["vad_of_diarized_units"] += vad_forwards
            before = forwards[0]
            with _timed(stats, "diarization"):
                outcome.diarization = diarize(
                    models.diarization, waveform, uid, outcome.vad.scores if levers.vad_segmentation_reuse_enabled else None,
                    shared_trunk=levers.embedding_shared_trunk_enabled, hints=unit.get("speaker_hints", NO_HINTS),
                )
            stats.segmentation_forwards["diarization"] += forwards[0] - before
            stats.segmentation_reuse[outcome.diarization.reuse] += 1
            stats.embedding_work.update(outcome.diarization.embedding_work.counts())
            stats.embedding_paths[outcome.diarization.embedding_work.path] += 1
            waveforms[uid] = waveform
        except Exception as error:  # one unit's failure is that unit's result, unless the device's
            raise_if_device_fault(error, f"VAD/diarization of {uid}")
            outcome.result_class, outcome.reason = ResultClass.FAILED, f"{type(error).__name__}: {error}"[:500]

    segments: list[Segment] = []
    for uid in waveforms:
        outcome = outcomes[uid]
        segments.extend(speech_segments(uid, outcome.vad.regions, outcome.duration_s))
    words: list[Word] = []
    if not segments:
        stats.decoder_checks_skipped += 1
    else:
        with _timed(stats, "asr"):
            words = _transcribe_checked(models, waveforms, segments, outcomes, asr_batch_size, cuda_graphs, stats)

    by_unit: dict[str, list[Word]] = collections.defaultdict(list)
    for word in words:
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
    return list(outcomes.values())


def _transcribe_checked(models, waveforms, segments, outcomes, asr_batch_size: int, cuda_graphs: bool,
                        stats: SectionStats) -> list[Word]:
    """One flight's ASR, the decoder's mode asserted before and after; a failed batch retried unit by unit."""
    stats.decoder_modes.add(check_decoder_mode(models.asr, models.device, cuda_graphs, "before"))
    try:
        words = transcribe_segments(models.asr, waveforms, segments, asr_batch_size)
    except DecoderModeError:
        raise
    except Exception as batch_error:  # the batch failed: retry unit by unit so one bad unit stays one
        if out_of_memory(batch_error):  # a batch too big for the device: smaller calls may fit
            free_device_cache(models.device)
        else:
            raise_if_device_fault(batch_error, "batched ASR")
        stats.asr_batch_retries += 1
        words = []
        for uid in waveforms:
            try:
                words.extend(transcribe_segments(models.asr, waveforms, [s for s in segments if s.unit_id == uid], asr_batch_size))
            except Exception as unit_error:
                raise_if_device_fault(unit_error, f"ASR of {uid}")
                outcomes[uid].result_class = ResultClass.FAILED
                outcomes[uid].reason = f"ASR: {type(unit_error).__name__}: {unit_error}"[:500]
    stats.decoder_modes.add(check_decoder_mode(models.asr, models.device, cuda_graphs, "after"))
    return words
