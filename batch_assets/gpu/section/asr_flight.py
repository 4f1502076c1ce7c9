"""One flight's ASR with one model, made ready and checked: the model loaded on first need and its decoder put in the
run's mode (`asr_ready`), the decoder's mode asserted before and after the call, the interpreter
after it (NeMo's CUDA-graph setup: `gpu/adapters/nemo_adapter.py`), and a failed batch retried unit by unit so that
one bad unit stays one. What `flight.device_work` calls for each ASR model among a flight's units.
"""

from __future__ import annotations

import time

import numpy as np

from batch_assets.gpu.asr.transcribe import (
    DecoderModeError,
    Segment,
    Word,
    apply_decoder_mode,
    batch_size_for,
    check_decoder_mode,
    speech_segments,
    transcribe_segments,
)
from batch_assets.gpu.device.faults import check_interpreter, free_device_cache, out_of_memory, raise_if_device_fault
from batch_assets.gpu.device.precision import asr_encoder_autocast, matmul_precision
from batch_assets.gpu.section.levers import Levers
from batch_assets.gpu.section.loaded import LoadedModels, load_or_explain
from batch_assets.gpu.section.stats import SectionStats
from batch_assets.models.languages import UNSPACED
from batch_assets.schema.results import ResultClass


def transcribe_flight(models: LoadedModels, name: str, waveforms: dict[str, np.ndarray], outcomes, levers: Levers,
                      stats: SectionStats) -> list[Word]:
    """The ASR of a flight's units that ASR model `name` hears (`waveforms`, in flight order; `outcomes`: the
    flight's `flight.UnitOutcome`s): the model made ready (`asr_ready`), each unit's speech cut into segments, the
    encoder at the run's precision, the call checked (`transcribe_checked`); its seconds are the `asr` stage's."""
    segments: list[Segment] = []
    for uid in waveforms:
        segments.extend(speech_segments(uid, outcomes[uid].vad.regions, outcomes[uid].duration_s))
    model = asr_ready(models, name, levers.asr_cuda_graphs_enabled, stats)
    unspaced = frozenset(uid for uid in waveforms if outcomes[uid].language in UNSPACED)
    started = time.perf_counter()
    with (asr_encoder_autocast(model, models.device, levers.half_precision_enabled),
          matmul_precision(models.device, levers.tf32_enabled)):
        words = transcribe_checked(models, model, waveforms, segments, outcomes,
                                   batch_size_for(models.device, levers.asr_batch_size),
                                   levers.asr_cuda_graphs_enabled, stats, unspaced)
    asr_s = time.perf_counter() - started
    stats.add("asr", asr_s, 0.0)
    stats.asr_seconds_by_model[name] += asr_s
    return words


def asr_ready(models: LoadedModels, name: str, cuda_graphs: bool, stats: SectionStats):
    """ASR model `name`, loaded on first need (its seconds are the `model_load` stage), its decoder in the run's mode
    (refused if its settings changed behind the section's back since this process last set them). A model that does
    not load fails the step, naming it, its languages and the variable (every unit of those languages needs it)."""
    started, first = time.perf_counter(), name not in models.asr_models
    languages = ", ".join(sorted(lang for lang, model_name in models.routing.items() if model_name == name))
    model = load_or_explain(f"ASR model {name!r} (languages {languages})", lambda: models.asr_model(name),
                  "fix BATCH_ASSETS_ASR_MODELS, or fill the model cache (batch-assets models fetch)")
    if first:
        stats.asr_model_loads[name] += 1
        stats.asr_model_load_seconds[name] += models.asr_load_seconds[name]  # the load alone, as LoadedModels timed it
        stats.add("model_load", 0.0, time.perf_counter() - started)
    models.decoder_settings[name] = apply_decoder_mode(model, cuda_graphs, models.decoder_settings.get(name),
                                                       models.word_confidence)
    return model


def transcribe_checked(models: LoadedModels, model, waveforms, segments, outcomes, asr_batch_size: int,
                        cuda_graphs: bool, stats: SectionStats,
                        token_units: frozenset[str] = frozenset()) -> list[Word]:
    """One flight's ASR with one model, the decoder's mode asserted before and after; a failed batch retried unit by
    unit. `token_units`: units whose words are the model's tokens (`transcribe.transcribe_segments`)."""
    stats.decoder_modes.add(check_decoder_mode(model, models.device, cuda_graphs, "before"))
    try:
        words = transcribe_segments(model, waveforms, segments, asr_batch_size, token_units)
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
                words.extend(transcribe_segments(model, waveforms, [s for s in segments if s.unit_id == uid],
                                                 asr_batch_size, token_units))
            except Exception as unit_error:
                raise_if_device_fault(unit_error, f"ASR of {uid}")
                if outcomes[uid].result_class is ResultClass.TRANSCRIBED:  # a diarization failure's reason stands
                    outcomes[uid].result_class = ResultClass.FAILED
                    outcomes[uid].reason = f"ASR: {type(unit_error).__name__}: {unit_error}"[:500]
    stats.decoder_modes.add(check_decoder_mode(model, models.device, cuda_graphs, "after"))
    check_interpreter("after ASR (the decoder's CUDA-graph setup)")
    return words
