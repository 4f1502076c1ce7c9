"""What the split paths share: whether a model splits into trunk and pooling, each pair's pooling weights, and the
embedding stock pooling gives a pair with all-zero weights.

A model that splits into `forward_frames(waveforms)` (the trunk) and `forward_embedding(frames, weights)`
(statistics pooling and head), as pyannote's WeSpeaker ResNets and our tiny x-vector do, can take the paths that
compute the trunk's frames once and pool many pairs from them (`shared_trunk.py`, `trunk_blocks.py`).
"""

from __future__ import annotations

import math

import numpy as np

from batch_assets.gpu.adapters import pyannote_adapter as adapter


def split_problem(pipeline) -> str | None:
    """Why this pipeline's embedding model cannot be split into trunk and pooling (None when it can)."""
    model = adapter.embedding_model(pipeline)
    if model is None:
        return f"{type(adapter.embedding_inference(pipeline)).__name__} is not a pyannote.audio model"
    missing = [name for name in ("forward_frames", "forward_embedding") if not callable(getattr(model, name, None))]
    if missing:
        return f"{type(model).__name__} has no {' or '.join(missing)}"
    if getattr(model, "fbank_only", False):
        return f"{type(model).__name__} is in fbank_only mode"
    from pyannote.audio.models.blocks.pooling import StatsPool

    if not any(isinstance(module, StatsPool) for module in model.modules()):
        # only statistics pooling is known to give every all-zero-weight pair the same embedding
        return f"{type(model).__name__} does not pool with pyannote's StatsPool"
    return None


def pooling_weights(pipeline, binary_segmentations, exclude_overlap: bool) -> np.ndarray:
    """Each (chunk, speaker) pair's pooling weights, (chunks * speakers, frames) float32, chosen as stock
    `get_embeddings` does: the overlap-free mask when it keeps more than the model's minimum, else the mask."""
    data = binary_segmentations.data
    num_chunks, num_frames, num_speakers = data.shape
    if exclude_overlap:
        inference = adapter.embedding_inference(pipeline)
        num_samples = binary_segmentations.sliding_window.duration * inference.sample_rate
        min_num_frames = math.ceil(num_frames * inference.min_num_samples / num_samples)
        clean = data * (1.0 * (np.sum(data, axis=2, keepdims=True) < 2))
    else:
        min_num_frames, clean = -1, data
    masks = np.nan_to_num(data, nan=0.0).astype(np.float32)
    clean = np.nan_to_num(clean, nan=0.0).astype(np.float32)
    use_clean = np.sum(clean, axis=1, keepdims=True) > min_num_frames  # (chunks, 1, speakers)
    chosen = np.where(use_clean, clean, masks)
    return np.ascontiguousarray(chosen.transpose(0, 2, 1).reshape(num_chunks * num_speakers, num_frames))


def active_pairs(weights: np.ndarray, binary_segmentations) -> np.ndarray:
    """(chunks, speakers): the pairs whose pooling `weights` are not all zero (the pairs a path pools)."""
    num_chunks, _, num_speakers = binary_segmentations.data.shape
    return weights.any(axis=1).reshape(num_chunks, num_speakers)


def zero_embeddings(model, num_speakers: int, weights: np.ndarray, active: np.ndarray, frames) -> np.ndarray:
    """A request's (chunks, speakers, dimension) embeddings, every one what stock pooling gives a pair with all-zero
    weights: pooled from one chunk's `frames` (the value does not depend on which chunk)."""
    import torch

    with torch.inference_mode():
        zero = model.forward_embedding(
            frames, weights=torch.zeros(1, weights.shape[1], device=frames.device)).cpu().numpy()[0]
    out = np.empty((len(active), num_speakers, zero.shape[-1]), dtype=zero.dtype)
    out[:] = zero
    return out
