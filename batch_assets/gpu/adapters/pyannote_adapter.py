"""Every reach into pyannote.audio's private attributes, in one place.

The GPU section needs a few things pyannote's `SpeakerDiarization` keeps private: its segmentation
`Inference` (VAD runs it, and its scores are handed to diarization), its embedding wrapper and the model
inside it (the shared-trunk lever calls the model's `forward_frames` / `forward_embedding`), and its
`Audio` reader (to crop chunks exactly as stock pyannote does). They are reached only through these
functions. `tests/test_pyannote_adapter.py` pins the pyannote version these were checked against and the
source of the stock methods the levers re-implement, and fails, naming what to re-check, on an upgrade.
"""

from __future__ import annotations

import hashlib
import inspect

PYANNOTE_CHECKED = "4.0.7"
# sha256 of the stock methods the levers stand in for, as of PYANNOTE_CHECKED (see the test)
STOCK_SOURCES = {
    "SpeakerDiarization.get_embeddings": "2c8c00b8b036488d",
    "SpeakerDiarization.get_segmentations": "4e9772ccb8d32760",
    "SpeakerDiarization.apply": "8a0b199ed198c3e4",
    "Inference.slide": "3de6feddaa975bc5",
    "Inference.infer": "f0b4dd7a0a93ccf0",
    "StatsPool.forward": "61dce2f9b75fb64b",
}


def segmentation_inference(pipeline):
    """The pipeline's segmentation `Inference` (model, window, step and batch size shared by VAD and diarization)."""
    return pipeline._segmentation


def embedding_inference(pipeline):
    """The pipeline's embedding wrapper (`PyannoteAudioPretrainedSpeakerEmbedding` for pyannote models)."""
    return pipeline._embedding


def embedding_model(pipeline):
    """The torch model inside the embedding wrapper, or None when the wrapper is not a pyannote model."""
    return getattr(embedding_inference(pipeline), "model_", None)


def crop(pipeline, file, chunk):
    """The chunk's waveform, (channels, samples), zero-padded past the end: what stock `get_embeddings` feeds."""
    waveform, _ = pipeline._audio.crop(file, chunk, mode="pad")
    return waveform


def binarized_segmentations(pipeline, segmentations):
    """What stock `apply` hands `get_embeddings` and the clustering for these segmentations (a powerset model's are
    already binary; others are binarized at the pipeline's onset)."""
    if segmentation_inference(pipeline).model.specifications.powerset:
        return segmentations
    from pyannote.audio.utils.signal import binarize

    return binarize(segmentations, onset=pipeline.segmentation.threshold, initial_state=False)


def slide_chunks(inference, waveform) -> list:
    """A (channels, samples) waveform cut as `Inference.slide` cuts it: its complete chunks (a view of the waveform,
    nothing copied), then the last one zero-padded when the chunks do not end on the waveform's end; each part
    (chunks, channels, window samples)."""
    import torch.nn.functional as F

    window_size = inference.model.audio.get_num_samples(inference.duration)
    step_size = round(inference.step * inference.model.audio.sample_rate)
    _, num_samples = waveform.shape
    chunks = [waveform.unfold(1, window_size, step_size).permute(1, 0, 2)] if num_samples >= window_size else []
    num_chunks = len(chunks[0]) if chunks else 0
    if num_samples < window_size or (num_samples - window_size) % step_size > 0:
        last = waveform[:, num_chunks * step_size :]
        chunks.append(F.pad(last, (0, window_size - last.shape[1]))[None])
    return chunks


def stock_source_digest(qualname: str) -> str:
    """A short digest of a stock pyannote method's source, to notice when an upgrade changes it."""
    from pyannote.audio.core.inference import Inference
    from pyannote.audio.models.blocks.pooling import StatsPool
    from pyannote.audio.pipelines import SpeakerDiarization

    owners = {"SpeakerDiarization": SpeakerDiarization, "StatsPool": StatsPool, "Inference": Inference}
    owner, name = qualname.split(".")
    return hashlib.sha256(inspect.getsource(getattr(owners[owner], name)).encode()).hexdigest()[:16]
