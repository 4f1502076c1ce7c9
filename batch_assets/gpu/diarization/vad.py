"""Voice activity detection from the pyannote segmentation model's raw scores.

The raw scores are exactly what the diarization pipeline's own segmentation step produces (same
`Inference` object: same model, window, step and batch size), so they can be handed to diarization
unchanged. Speech regions are derived from them the way pyannote's `VoiceActivityDetection` pipeline
does for a powerset model: max over local speakers, overlap-add aggregation with a Hamming window,
then binarisation at 0.5.

`vad_flight` is the section's VAD stage: a flight's units batched (lever 5), unit by unit when the batch breaks.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from batch_assets.gpu.adapters.pyannote_adapter import segmentation_inference
from batch_assets.gpu.device.faults import raise_if_device_fault

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


def speech_regions(inference, scores, duration_s: float) -> list[tuple[float, float]]:
    from pyannote.audio.core.inference import Inference
    from pyannote.audio.utils.signal import Binarize
    from pyannote.core import Segment, SlidingWindowFeature

    speech = SlidingWindowFeature(np.max(scores.data, axis=-1, keepdims=True), scores.sliding_window)
    aggregated = Inference.aggregate(
        speech,
        inference.model.receptive_field,
        warm_up=inference.warm_up,
        hamming=True,
        missing=0.0,
    )
    aggregated.data = aggregated.crop(Segment(0.0, duration_s), mode="loose")
    binarize = Binarize(onset=0.5, offset=0.5, min_duration_on=0.0, min_duration_off=0.0)
    timeline = binarize(aggregated).get_timeline().support()
    return [(max(0.0, s.start), min(duration_s, s.end)) for s in timeline if s.end > s.start]


@dataclasses.dataclass
class FlightVad:
    """A flight's VAD as `vad_flight` ran it: each unit's result, or the reason it failed; the seconds of each
    forward (the batch's, or each unit's: device, host), and whether a batch fell back to unit by unit."""

    results: dict[str, VadResult] = dataclasses.field(default_factory=dict)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: list[tuple[float, float]] = dataclasses.field(default_factory=list)
    batch_fallback: bool = False
    forwards: int = 0  # segmentation forwards the flight's VAD ran, all units together


def vad_flight(pipeline, waveforms: dict[str, np.ndarray], batched: bool, forwards: list[int]) -> FlightVad:
    """Every unit's VAD: with `batched` (lever 5) the segmentation forwards batched across the units; unit by unit
    without, or when the batch raises (a unit's audio broke it), so that one bad unit stays one, its reason in
    `failed`. A device fault raises (`device/faults.py`). `forwards`: the pipeline's segmentation forward counter;
    a unit's own forwards are counted in its result."""
    inference = segmentation_inference(pipeline)  # the diarization pipeline's own segmentation step
    out, first = FlightVad(), forwards[0]
    if batched and waveforms:
        started = time.perf_counter()
        try:
            out.results, device_s = _batched(inference, waveforms)
            out.seconds.append((device_s, time.perf_counter() - started - device_s))
        except Exception as error:  # a unit's audio broke the batch: unit by unit, so that one bad unit stays one
            raise_if_device_fault(error, f"batched VAD of {', '.join(waveforms)}")
            out.batch_fallback = True
    for uid, waveform in waveforms.items():
        if uid in out.results:
            continue
        started, before = time.perf_counter(), forwards[0]
        try:
            result = _unit(inference, waveform, uid)
            result.forwards = forwards[0] - before
        except Exception as error:  # one unit's failure is that unit's result, unless the device's
            raise_if_device_fault(error, f"VAD of {uid}")
            out.failed[uid] = f"{type(error).__name__}: {error}"[:500]
            continue
        out.results[uid] = result
        out.seconds.append((result.device_s, time.perf_counter() - started - result.device_s))
    out.forwards = forwards[0] - first
    return out


def run_vad_flight(pipeline, waveforms: dict[str, np.ndarray]) -> tuple[dict[str, VadResult], float]:
    """Every unit's VAD with the segmentation forwards batched across the units (lever 5); also the forwards'
    seconds."""
    return _batched(segmentation_inference(pipeline), waveforms)


def run_vad(pipeline, waveform: np.ndarray, uri: str) -> VadResult:
    """One unit's VAD."""
    return _unit(segmentation_inference(pipeline), waveform, uri)


def _batched(inference, waveforms: dict[str, np.ndarray]) -> tuple[dict[str, VadResult], float]:
    from batch_assets.gpu.diarization.flight_batch import segment_files

    files = {uid: as_pyannote_file(w, uid) for uid, w in waveforms.items()}
    started = time.perf_counter()
    scores = dict(zip(files, segment_files(inference, list(files.values())), strict=True))
    device_s = time.perf_counter() - started
    return {uid: VadResult(scores=scores[uid],
                           regions=speech_regions(inference, scores[uid], len(waveforms[uid]) / SAMPLE_RATE))
            for uid in files}, device_s


def _unit(inference, waveform: np.ndarray, uri: str) -> VadResult:
    started = time.perf_counter()
    scores = inference(as_pyannote_file(waveform, uri))
    device_s = time.perf_counter() - started
    return VadResult(scores=scores, regions=speech_regions(inference, scores, len(waveform) / SAMPLE_RATE),
                     device_s=device_s)
