"""One flight's ASR with one model, checked: the decoder's mode asserted before and after the call, the interpreter
after it (NeMo's CUDA-graph setup: `gpu/nemo_adapter.py`), and a failed batch retried unit by unit so that one bad
unit stays one. What `section.device_work` calls for each ASR model among a flight's units.
"""

from __future__ import annotations

from batch_assets.gpu.asr import DecoderModeError, Word, check_decoder_mode, transcribe_segments
from batch_assets.gpu.faults import check_interpreter, free_device_cache, out_of_memory, raise_if_device_fault
from batch_assets.gpu.loaded import LoadedModels
from batch_assets.gpu.section_stats import SectionStats
from batch_assets.schema.results import ResultClass


def transcribe_checked(models: LoadedModels, model, waveforms, segments, outcomes, asr_batch_size: int,
                        cuda_graphs: bool, stats: SectionStats,
                        token_units: frozenset[str] = frozenset()) -> list[Word]:
    """One flight's ASR with one model, the decoder's mode asserted before and after; a failed batch retried unit by
    unit. `token_units`: units whose words are the model's tokens (`asr.transcribe_segments`)."""
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
