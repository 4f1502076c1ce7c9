"""Lever 4, the shared embedding trunk: each chunk through the embedding network's trunk once, its speakers pooled.

Stock pyannote embeds every (chunk, local speaker) pair, running the whole embedding network on the chunk's
audio once per pair, silent speakers included. A model that splits into trunk and pooling (`pooling.py`) runs the
trunk once per chunk that has an active speaker here and pools only the pairs whose weights are not all zero; a
pair whose weights are all zero gets what stock pooling computes for it (zero statistics through the head, the same
for every such pair). With lever 5 the chunks of several units fill the same batches. Bitwise or not: the
`gpu/diarization/pipeline.py` module docstring.
"""

from __future__ import annotations

import numpy as np

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.gpu.device.precision import autocast
from batch_assets.gpu.diarization.embeddings.interface import EmbeddingPath, EmbeddingRequest
from batch_assets.gpu.diarization.embeddings.pooling import active_pairs, pooling_weights, zero_embeddings

SHARED_TRUNK = "shared trunk"
SHARED_TRUNK_ACROSS_UNITS = "shared trunk, batched across units"


class SharedTrunkPath(EmbeddingPath):
    """The trunk once per chunk with an active speaker, in `embedding_batch_size`-chunk batches that span the
    requests; `half_precision`: the trunk under autocast (`device/precision.py`)."""

    batches_units = True  # the chunks of several units fill the same batches

    def __init__(self, half_precision: bool = False):
        self.half_precision = half_precision

    def name(self, across_units: bool) -> str:
        return SHARED_TRUNK_ACROSS_UNITS if across_units else SHARED_TRUNK

    def embed(self, pipeline, requests: list[EmbeddingRequest], exclude_overlap: bool, across_units: bool = False,
              hook=None, skip: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Each chunk with an active pair not in `skip` runs the trunk once; each such pair is pooled from its
        chunk's frames; the other pairs keep the zero-weight vector (a skipped pair's is the caller's to fill)."""
        import torch

        inference, model = adapter.embedding_inference(pipeline), adapter.embedding_model(pipeline)
        plans = []
        for r, request in enumerate(requests):
            request.work.path = self.name(across_units)
            weights = pooling_weights(pipeline, request.binarized, exclude_overlap)  # (chunks * speakers, frames)
            active = active_pairs(weights, request.binarized)
            request.work.active_pairs = int(active.sum())
            if skip is not None:
                active = active & ~skip[r]
            plans.append((weights, active, request.binarized.data.shape[2]))
        order = [(r, c) for r, (_, active, _) in enumerate(plans) for c in range(len(active)) if active[c].any()]
        order = order or [(0, 0)]  # chunk 0 only to get the zero-weight vector
        size = pipeline.embedding_batch_size
        batches = [order[i : i + size] for i in range(0, len(order), size)]
        out: list[np.ndarray | None] = [None] * len(plans)
        if hook is not None:
            hook("embeddings", None, total=len(batches), completed=0)
        with torch.inference_mode():
            for i, batch in enumerate(batches, 1):
                waveforms = torch.vstack([adapter.crop(pipeline, requests[r].file,
                                                       requests[r].binarized.sliding_window[c])[None]
                                          for r, c in batch])
                with autocast(inference.device, self.half_precision, "embedding"):
                    frames = model.forward_frames(waveforms.to(inference.device))
                frames = frames.float()
                for r in sorted({r for r, _ in batch}):
                    weights, active, num_speakers = plans[r]
                    work = requests[r].work
                    rows = [k for k, (rr, _) in enumerate(batch) if rr == r]
                    chunks = np.asarray([batch[k][1] for k in rows])
                    work.trunk_forwards += len(rows)
                    work.trunk_seconds += len(rows) * requests[r].binarized.sliding_window.duration
                    if out[r] is None:  # every pair starts as what stock pooling gives a pair with all-zero weights
                        out[r] = zero_embeddings(model, num_speakers, weights, active, frames[rows[0] : rows[0] + 1])
                    pair_rows, speakers = np.nonzero(active[chunks])
                    if len(pair_rows):
                        pair_chunks = chunks[pair_rows]
                        pair_weights = torch.from_numpy(weights[pair_chunks * num_speakers + speakers]).to(
                            frames.device)
                        index = torch.from_numpy(np.asarray(rows)[pair_rows]).to(frames.device)
                        pooled = model.forward_embedding(frames[index], weights=pair_weights)
                        out[r][pair_chunks, speakers] = pooled.cpu().numpy()
                        work.pooled_pairs += len(pair_rows)
                if hook is not None:
                    hook("embeddings", None, total=len(batches), completed=i)
        # a request with no active pair (its chunks never reached a batch): every pair gets the zero-weight vector
        return [o if o is not None else zero_embeddings(model, plans[r][2], plans[r][0], plans[r][1], frames[:1])
                for r, o in enumerate(out)]
