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


def stock_source_digest(qualname: str) -> str:
    """A short digest of a stock pyannote method's source, to notice when an upgrade changes it."""
    from pyannote.audio.models.blocks.pooling import StatsPool
    from pyannote.audio.pipelines import SpeakerDiarization

    owners = {"SpeakerDiarization": SpeakerDiarization, "StatsPool": StatsPool}
    owner, name = qualname.split(".")
    return hashlib.sha256(inspect.getsource(getattr(owners[owner], name)).encode()).hexdigest()[:16]
