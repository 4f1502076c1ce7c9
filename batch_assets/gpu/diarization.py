"""Diarization that can reuse the VAD pass's segmentation scores (lever 2).

`ReusingSpeakerDiarization` is pyannote's `SpeakerDiarization` with one override: `get_segmentations`
consumes scores offered by the VAD pass (once) instead of running the segmentation model a second
time, when they match what the pipeline would compute (shape, window, step, model). Anything else falls
back to a fresh forward, and the fallback is recorded. Since the scores come from the very same
`Inference` object, results are identical to serial pyannote.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from batch_assets.models.environment import quiet_model_libraries

quiet_model_libraries()

from pyannote.audio.pipelines import SpeakerDiarization  # noqa: E402

from batch_assets.gpu.vad import as_pyannote_file  # noqa: E402


class ReusingSpeakerDiarization(SpeakerDiarization):
    _offered = None
    last_reuse: str = "not offered"

    def offer_segmentations(self, scores) -> None:
        self._offered = scores

    def _mismatch(self, scores, file) -> str | None:
        inference = self._segmentation
        window = scores.sliding_window
        if not np.isclose(window.duration, inference.duration) or not np.isclose(window.step, inference.step):
            return f"window {window.duration}/{window.step} s != {inference.duration}/{inference.step} s"
        num_samples = file["waveform"].shape[-1]
        frames = inference.model.num_frames(round(inference.duration * file["sample_rate"]))
        expected_chunks = max(1, int(np.ceil(max(0.0, num_samples / file["sample_rate"] - inference.duration) / inference.step)) + 1)
        if scores.data.ndim != 3 or scores.data.shape[1] != frames:
            return f"scores shape {scores.data.shape} has not {frames} frames per chunk"
        if abs(scores.data.shape[0] - expected_chunks) > 1:
            return f"{scores.data.shape[0]} chunks where {expected_chunks} were expected"
        return None

    def get_segmentations(self, file, hook=None):
        offered, self._offered = self._offered, None  # consume once
        if offered is None:
            self.last_reuse = "not offered"
            return super().get_segmentations(file, hook=hook)
        problem = self._mismatch(offered, file)
        if problem is not None:
            self.last_reuse = f"fallback: {problem}"
            return super().get_segmentations(file, hook=hook)
        self.last_reuse = "reused"
        return offered


def make_reusing(pipeline: SpeakerDiarization) -> ReusingSpeakerDiarization:
    """Turn a loaded pipeline (production or builtin) into the reusing subclass; it adds no state."""
    if not isinstance(pipeline, SpeakerDiarization):
        raise TypeError(f"expected a pyannote SpeakerDiarization pipeline, got {type(pipeline).__name__}")
    pipeline.__class__ = ReusingSpeakerDiarization
    return pipeline


@dataclasses.dataclass
class DiarizationResult:
    turns: list[tuple[float, float, str]]
    exclusive_turns: list[tuple[float, float, str]]
    embeddings: dict[str, np.ndarray]
    reuse: str


def _turns(annotation) -> list[tuple[float, float, str]]:
    return [(float(seg.start), float(seg.end), str(label)) for seg, _, label in annotation.itertracks(yield_label=True)]


def diarize(pipeline: ReusingSpeakerDiarization, waveform: np.ndarray, uri: str, vad_scores=None) -> DiarizationResult:
    if vad_scores is not None:
        pipeline.offer_segmentations(vad_scores)
    output = pipeline(as_pyannote_file(waveform, uri))
    labels = output.speaker_diarization.labels()
    embeddings = {}
    if output.speaker_embeddings is not None:
        embeddings = {label: np.asarray(output.speaker_embeddings[i], dtype=np.float32) for i, label in enumerate(labels)}
    return DiarizationResult(
        turns=_turns(output.speaker_diarization),
        exclusive_turns=_turns(output.exclusive_speaker_diarization),
        embeddings=embeddings,
        reuse=pipeline.last_reuse,
    )
