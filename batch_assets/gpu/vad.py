"""Voice activity detection from the pyannote segmentation model's raw scores.

The raw scores are exactly what the diarization pipeline's own segmentation step produces (same
`Inference` object: same model, window, step and batch size), so they can be handed to diarization
unchanged. Speech regions are derived from them the way pyannote's `VoiceActivityDetection` pipeline
does for a powerset model: max over local speakers, overlap-add aggregation with a Hamming window,
then binarisation at 0.5.
"""

from __future__ import annotations

import dataclasses

import numpy as np

SAMPLE_RATE = 16_000


@dataclasses.dataclass
class VadResult:
    scores: object  # SlidingWindowFeature (num_chunks, frames_per_chunk, local_speakers)
    regions: list[tuple[float, float]]
    device_s: float = 0.0  # seconds in the segmentation forwards (unit by unit; batched, the flight's are counted once)
    forwards: int = 0  # segmentation forwards run for this unit alone, counted by the section (0 when batched across
    # units)

    @property
    def speech_s(self) -> float:
        return float(sum(end - start for start, end in self.regions))


def as_pyannote_file(waveform: np.ndarray, uri: str) -> dict:
    import torch

    return {"waveform": torch.from_numpy(np.ascontiguousarray(waveform))[None], "sample_rate": SAMPLE_RATE, "uri": uri}


def speech_regions(segmentation_inference, scores, duration_s: float) -> list[tuple[float, float]]:
    from pyannote.audio.core.inference import Inference
    from pyannote.audio.utils.signal import Binarize
    from pyannote.core import Segment, SlidingWindowFeature

    speech = SlidingWindowFeature(np.max(scores.data, axis=-1, keepdims=True), scores.sliding_window)
    aggregated = Inference.aggregate(
        speech,
        segmentation_inference.model.receptive_field,
        warm_up=segmentation_inference.warm_up,
        hamming=True,
        missing=0.0,
    )
    aggregated.data = aggregated.crop(Segment(0.0, duration_s), mode="loose")
    binarize = Binarize(onset=0.5, offset=0.5, min_duration_on=0.0, min_duration_off=0.0)
    timeline = binarize(aggregated).get_timeline().support()
    return [(max(0.0, s.start), min(duration_s, s.end)) for s in timeline if s.end > s.start]


def run_vad_flight(pipeline, waveforms: dict[str, np.ndarray]) -> tuple[dict[str, VadResult], float]:
    """Every unit's VAD with the segmentation forwards batched across the units (lever 5); also the forwards'
    seconds."""
    import time

    from batch_assets.gpu.flight_batch import segment_files
    from batch_assets.gpu.pyannote_adapter import segmentation_inference

    inference = segmentation_inference(pipeline)
    files = {uid: as_pyannote_file(w, uid) for uid, w in waveforms.items()}
    started = time.perf_counter()
    scores = dict(zip(files, segment_files(inference, list(files.values())), strict=True))
    device_s = time.perf_counter() - started
    return {uid: VadResult(scores=scores[uid],
                           regions=speech_regions(inference, scores[uid], len(waveforms[uid]) / SAMPLE_RATE))
            for uid in files}, device_s


def run_vad(pipeline, waveform: np.ndarray, uri: str) -> VadResult:
    import time

    from batch_assets.gpu.pyannote_adapter import segmentation_inference

    inference = segmentation_inference(pipeline)  # the diarization pipeline's own segmentation step
    started = time.perf_counter()
    scores = inference(as_pyannote_file(waveform, uri))
    device_s = time.perf_counter() - started
    return VadResult(scores=scores, regions=speech_regions(inference, scores, len(waveform) / SAMPLE_RATE),
                     device_s=device_s)
