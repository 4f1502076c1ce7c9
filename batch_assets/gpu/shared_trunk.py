"""Lever 4, the shared embedding trunk: each chunk through the embedding network's trunk once, its speakers pooled.

Stock pyannote embeds every (chunk, local speaker) pair, running the whole embedding network on the chunk's
audio once per pair, silent speakers included. Models that split into `forward_frames(waveforms)` (the trunk)
and `forward_embedding(frames, weights)` (statistics pooling and head), as pyannote's WeSpeaker ResNets and our
tiny x-vector do, run the trunk once per chunk that has an active speaker and pool only the pairs whose weights
are not all zero; a pair whose weights are all zero gets what stock pooling computes for it (zero statistics
through the head, the same for every such pair). With lever 5 the chunks of several files fill the same batches.
`shared_trunk_problem` says why a model cannot take this path; `EmbeddingWork` counts what ran, on both paths.
Bitwise or not: `gpu/diarization.py`'s module docstring.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from batch_assets.gpu import pyannote_adapter as adapter
from batch_assets.gpu.covered_pairs import NOT_COPIED, fill_copies

SHARED_TRUNK = "shared trunk"
SHARED_TRUNK_ACROSS_UNITS = "shared trunk, batched across units"
STOCK_SWITCHED_OFF = "stock (switch off)"


@dataclasses.dataclass
class EmbeddingWork:
    """What one call's embedding step ran: trunk forwards (waveforms through the network's trunk; stock runs
    one per pair) and pooled pairs (statistics pooling + head), out of `chunks` x local speakers `pairs`."""

    path: str = "not run"
    chunks: int = 0
    pairs: int = 0
    active_pairs: int = 0  # pairs whose pooling weights are not all zero
    trunk_forwards: int = 0
    pooled_pairs: int = 0
    trunk_seconds: float = 0.0  # audio seconds through the trunk (the per-chunk paths: forwards x chunk duration)
    copied_pairs: int = 0  # approximate lever B: active pairs given a neighbour pair's embedding, not pooled

    def counts(self) -> dict[str, float]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "path"}


def shared_trunk_problem(pipeline) -> str | None:
    """Why this pipeline's embedding model cannot share its trunk (None when it can)."""
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


def shared_trunk_embeddings(pipeline, requests, exclude_overlap: bool, works: list[EmbeddingWork],
                            half_precision: bool = False, hook=None, sources: list | None = None) -> list[np.ndarray]:
    """Lever 4 over one or several files (lever 5: the chunks of a flight's units fill the same batches).

    `requests`: (file, binarized segmentations) pairs; returns each one's (chunks, local speakers, dimension)
    embeddings and counts its work in `works`. Each chunk with an active speaker runs the trunk once; each active
    pair is pooled from its chunk's frames; a pair with all-zero weights gets what stock pooling gives it.
    `sources` (approximate lever B, `covered_pairs.py`): per request, the pairs that take a neighbour pair's
    embedding instead of being pooled; a chunk whose active pairs are all covered skips the trunk."""
    import torch

    from batch_assets.gpu.precision import autocast

    inference, model = adapter.embedding_inference(pipeline), adapter.embedding_model(pipeline)
    plans = []
    for (file, binary_segmentations), work in zip(requests, works, strict=True):
        num_chunks, _, num_speakers = binary_segmentations.data.shape
        weights = pooling_weights(pipeline, binary_segmentations, exclude_overlap)  # (chunks * speakers, frames)
        active = weights.any(axis=1).reshape(num_chunks, num_speakers)
        work.active_pairs = int(active.sum())
        if sources is not None:
            active = active & (sources[len(plans)] == NOT_COPIED)
        plans.append((file, binary_segmentations.sliding_window, weights, active, num_speakers))
    order = [(r, c) for r, (_, _, _, active, _) in enumerate(plans) for c in range(len(active)) if active[c].any()]
    order = order or [(0, 0)]  # chunk 0 only to get the zero-weight vector
    size = pipeline.embedding_batch_size
    batches = [order[i : i + size] for i in range(0, len(order), size)]
    out: list[np.ndarray | None] = [None] * len(plans)
    if hook is not None:
        hook("embeddings", None, total=len(batches), completed=0)
    with torch.inference_mode():
        for i, batch in enumerate(batches, 1):
            waveforms = torch.vstack([adapter.crop(pipeline, plans[r][0], plans[r][1][c])[None] for r, c in batch])
            with autocast(inference.device, half_precision, "embedding"):
                frames = model.forward_frames(waveforms.to(inference.device))
            frames = frames.float()
            for r in sorted({r for r, _ in batch}):
                _, _, weights, active, num_speakers = plans[r]
                rows = [k for k, (rr, _) in enumerate(batch) if rr == r]
                chunks = np.asarray([batch[k][1] for k in rows])
                works[r].trunk_forwards += len(rows)
                works[r].trunk_seconds += len(rows) * plans[r][1].duration
                if out[r] is None:  # every pair starts as what stock pooling gives a pair with all-zero weights
                    out[r] = zero_embeddings(model, plans[r], frames[rows[0] : rows[0] + 1])
                pair_rows, speakers = np.nonzero(active[chunks])
                if len(pair_rows):
                    pair_chunks = chunks[pair_rows]
                    pair_weights = torch.from_numpy(weights[pair_chunks * num_speakers + speakers]).to(frames.device)
                    index = torch.from_numpy(np.asarray(rows)[pair_rows]).to(frames.device)
                    pooled = model.forward_embedding(frames[index], weights=pair_weights)
                    out[r][pair_chunks, speakers] = pooled.cpu().numpy()
                    works[r].pooled_pairs += len(pair_rows)
            if hook is not None:
                hook("embeddings", None, total=len(batches), completed=i)
    # a request with no active pair (its chunks never reached a batch): every pair gets the zero-weight vector
    out = [o if o is not None else zero_embeddings(model, plans[r], frames[:1]) for r, o in enumerate(out)]
    for r, embeddings in enumerate(out if sources is not None else ()):
        works[r].copied_pairs = fill_copies(embeddings, sources[r])
    return out


def zero_embeddings(model, plan, frames) -> np.ndarray:
    """A request's (chunks, speakers, dimension) embeddings, every one what stock pooling gives a pair with all-zero
    weights: pooled from one chunk's `frames` (the value does not depend on which chunk)."""
    import torch

    _, _, weights, active, num_speakers = plan
    with torch.inference_mode():
        zero = model.forward_embedding(
            frames, weights=torch.zeros(1, weights.shape[1], device=frames.device)).cpu().numpy()[0]
    out = np.empty((len(active), num_speakers, zero.shape[-1]), dtype=zero.dtype)
    out[:] = zero
    return out


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
