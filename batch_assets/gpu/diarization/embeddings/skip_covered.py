"""Approximate lever B (`embedding_skip_covered_enabled`, off by default): a chunk speaker covered by a neighbour
chunk's same speaker takes that speaker's embedding instead of its own.

community-1 slides 10 s chunks by 1 s, so a speaker who talks on is the same local speaker of chunk after chunk,
each embedded from nearly the same speech. Every other chunk (the odd ones; the last is always embedded) looks at
its two neighbours, which are embedded: a local speaker whose active frames lie at least `MIN_COVERED` inside the
overlap with a neighbour, where one of that neighbour's local speakers is active on nearly the same frames
(intersection over union >= `MIN_AGREEMENT` on the overlap), is that neighbour's speaker: it is given the
neighbour pair's embedding, and is not embedded. A chunk all of whose active speakers are covered does not go
through the trunk at all (the shared trunk); with lever A (`trunk_blocks.py`) covered pairs skip pooling.
`SkipCoveredPath` wraps the trunk path the other levers pick: it finds the covered pairs, has the trunk path skip
them, and fills them in.

What moves: a covered pair's embedding is its neighbour's, pooled over a window one step away, so the clustering
sees that embedding twice; where the pair would have been assigned another cluster than its neighbour, the
reconstruction's vote for those frames moves. Speaker changes, overlaps and short turns break the agreement and
are embedded as before. The gate for approximate levers (`gate/compare.py`) measures what moved.
"""

from __future__ import annotations

import numpy as np

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.gpu.diarization.embeddings.interface import EmbeddingPath, EmbeddingRequest
from batch_assets.gpu.diarization.embeddings.pooling import active_pairs, pooling_weights

MIN_COVERED = 0.8  # share of a pair's active frames inside the overlap with the neighbour
MIN_AGREEMENT = 0.9  # intersection over union of the two pairs' active frames on the overlap
NOT_COPIED = -1
COVERED_COPIED = "covered pairs copied (approximate)"


def covered_sources(binarized: np.ndarray, active: np.ndarray, frame_shift: int) -> np.ndarray:
    """For each (chunk, local speaker) pair, the flat index (chunk * speakers + speaker) of the neighbour pair whose
    embedding it takes, or `NOT_COPIED`. `binarized`: (chunks, frames, speakers) speaker activity; `active`:
    (chunks, speakers), the pairs that would be pooled; `frame_shift`: frames per chunk step (a neighbour's frame
    `f` is this chunk's frame `f + frame_shift`)."""
    data = np.nan_to_num(binarized, nan=0.0) > 0
    num_chunks, num_frames, num_speakers = data.shape
    sources = np.full((num_chunks, num_speakers), NOT_COPIED, dtype=np.int64)
    if frame_shift <= 0 or frame_shift >= num_frames:
        return sources
    overlap = num_frames - frame_shift
    for c in range(1, num_chunks - 1, 2):  # odd chunks, never the last: their neighbours are embedded
        for s in np.flatnonzero(active[c]):
            mine = data[c, :, s]
            total = mine.sum()
            if total == 0:
                continue
            # (neighbour, this chunk's overlap frames, the neighbour's overlap frames)
            for n, here, there in ((c - 1, slice(0, overlap), slice(frame_shift, None)),
                                   (c + 1, slice(frame_shift, None), slice(0, overlap))):
                inside = mine[here]
                if inside.sum() < MIN_COVERED * total:
                    continue
                theirs = data[n, there, :]  # (overlap frames, speakers)
                union = np.logical_or(inside[:, None], theirs).sum(axis=0)
                agreement = np.logical_and(inside[:, None], theirs).sum(axis=0) / np.maximum(union, 1)
                agreement[~active[n]] = 0.0
                best = int(np.argmax(agreement))
                if agreement[best] >= MIN_AGREEMENT:
                    sources[c, s] = n * num_speakers + best
                    break
    return sources


def fill_copies(embeddings: np.ndarray, sources: np.ndarray) -> int:
    """Give each covered pair its source pair's embedding, in place; returns how many were copied."""
    num_speakers = embeddings.shape[1]
    chunks, speakers = np.nonzero(sources != NOT_COPIED)
    if len(chunks):
        flat = sources[chunks, speakers]
        embeddings[chunks, speakers] = embeddings[flat // num_speakers, flat % num_speakers]
    return int(len(chunks))


def frame_shift(binary_segmentations, frames_step_s: float) -> int:
    """Frames per chunk step: the chunks' step over the segmentation model's frame step, rounded."""
    return int(round(binary_segmentations.sliding_window.step / frames_step_s))


class SkipCoveredPath(EmbeddingPath):
    """Lever B over a trunk path (`inner`: the shared trunk or lever A's trunk blocks): the covered pairs are left
    to `inner` to skip, then given their source pair's embedding."""

    def __init__(self, inner: EmbeddingPath):
        self.inner = inner
        self.batches_units = inner.batches_units

    def name(self, across_units: bool) -> str:
        return f"{self.inner.name(across_units)}, {COVERED_COPIED}"

    def embed(self, pipeline, requests: list[EmbeddingRequest], exclude_overlap: bool, across_units: bool = False,
              hook=None, skip: list[np.ndarray] | None = None) -> list[np.ndarray]:
        step = adapter.segmentation_inference(pipeline).model.receptive_field.step
        sources = [covered_sources(request.binarized.data,
                                   active_pairs(pooling_weights(pipeline, request.binarized, exclude_overlap),
                                                request.binarized),
                                   frame_shift(request.binarized, step))
                   for request in requests]
        covered = [s != NOT_COPIED if skip is None else (s != NOT_COPIED) | skip[r] for r, s in enumerate(sources)]
        out = self.inner.embed(pipeline, requests, exclude_overlap, across_units, hook, skip=covered)
        for request, embeddings, source in zip(requests, out, sources, strict=True):
            request.work.path = self.name(across_units)
            request.work.copied_pairs = fill_copies(embeddings, source)
        return out
