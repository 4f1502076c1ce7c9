"""The stock path: pyannote's own `get_embeddings`, the whole embedding network once per (chunk, local speaker) pair.

Taken when lever 4 and the approximate levers are off (`STOCK_SWITCHED_OFF`), and as the fallback, its reason
recorded, for a model that does not split into trunk and pooling (`pooling.split_problem`) or a pipeline in
training mode. Its work is counted by a forward hook on the embedding model (`count_forwards`, installed when the
pipeline is levered): every row through the network is one trunk forward and one pooled pair.
"""

from __future__ import annotations

import numpy as np

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.gpu.diarization.embeddings.interface import EmbeddingPath, EmbeddingRequest
from batch_assets.gpu.diarization.embeddings.pooling import active_pairs, pooling_weights

STOCK_SWITCHED_OFF = "stock (switch off)"
ROWS_KEY = "_embedding_rows"  # the pipeline's counter of rows through the embedding model's forward


def stock_fallback(problem: str) -> str:
    return f"stock (fallback: {problem})"


def count_forwards(pipeline) -> None:
    """Count every row through the embedding model's forward on `pipeline` (the stock path's work)."""
    rows = [0]
    model = adapter.embedding_model(pipeline)
    if model is not None:
        model.register_forward_hook(
            lambda _module, args, _out: rows.__setitem__(0, rows[0] + (len(args[0]) if args else 0)))
    setattr(pipeline, ROWS_KEY, rows)


class StockPath(EmbeddingPath):
    """pyannote's `SpeakerDiarization.get_embeddings`, one request at a time; `reason`: why it is taken."""

    batches_units = False

    def __init__(self, reason: str = STOCK_SWITCHED_OFF):
        self.reason = reason

    def name(self, across_units: bool) -> str:
        return self.reason

    def embed(self, pipeline, requests: list[EmbeddingRequest], exclude_overlap: bool, across_units: bool = False,
              hook=None, skip: list[np.ndarray] | None = None) -> list[np.ndarray]:
        from pyannote.audio.pipelines import SpeakerDiarization

        if skip is not None:
            raise ValueError("the stock path computes every pair: it skips none (wrap a trunk path instead)")
        out = []
        rows = getattr(pipeline, ROWS_KEY)
        for request in requests:
            work, binarized = request.work, request.binarized
            work.path = self.name(across_units)
            if exclude_overlap:
                adapter.embedding_inference(pipeline).min_num_samples  # noqa: B018 (its probing forwards are not the
                # step's work)
            before = rows[0]
            out.append(SpeakerDiarization.get_embeddings(pipeline, request.file, binarized,
                                                         exclude_overlap=exclude_overlap, hook=hook))
            # measured by the model's forward hook; an embedding that is not a torch model embeds every pair
            counted = rows[0] - before if adapter.embedding_model(pipeline) is not None else work.pairs
            work.trunk_forwards = work.pooled_pairs = counted
            work.trunk_seconds = counted * binarized.sliding_window.duration
            work.active_pairs = int(active_pairs(pooling_weights(pipeline, binarized, exclude_overlap),
                                                 binarized).sum())
        return out
