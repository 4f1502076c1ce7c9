"""Which path diarization's embedding step takes for a call's levers, and running it over one or several files.

The exact path is lever 4's shared trunk (`shared_trunk.py`: the trunk once per chunk). The approximate levers,
off by default, change it: A (`trunk_blocks.py`) puts each second through the trunk once, in blocks, instead of
once per overlapping chunk; B (`covered_pairs.py`) gives a chunk speaker covered by a neighbour chunk's same
speaker that speaker's embedding instead of pooling its own. Either one needs a model that splits into trunk and
pooling (`shared_trunk.shared_trunk_problem`), and runs through this split path even with lever 4 off. A path
named `... (approximate)` is what the `embedding_path` column and the run's `embedding_paths` metadata show.
"""

from __future__ import annotations

import numpy as np

from batch_assets.gpu import pyannote_adapter as adapter
from batch_assets.gpu.covered_pairs import covered_sources, frame_shift
from batch_assets.gpu.shared_trunk import (
    SHARED_TRUNK,
    SHARED_TRUNK_ACROSS_UNITS,
    EmbeddingWork,
    pooling_weights,
    shared_trunk_embeddings,
)
from batch_assets.gpu.trunk_blocks import trunk_block_embeddings

TRUNK_BLOCKS = "trunk blocks (approximate)"
COVERED_COPIED = "covered pairs copied (approximate)"


def takes_split_path(call) -> bool:
    """Whether a call's levers ask for the split model's path (lever 4, or either approximate lever)."""
    return call.shared_trunk or call.trunk_blocks or call.skip_covered


def path_name(call, across_units: bool) -> str:
    trunk = TRUNK_BLOCKS if call.trunk_blocks else SHARED_TRUNK_ACROSS_UNITS if across_units else SHARED_TRUNK
    return f"{trunk}, {COVERED_COPIED}" if call.skip_covered else trunk


def split_embeddings(pipeline, requests, exclude_overlap: bool, works: list[EmbeddingWork], call,
                     across_units: bool = False, hook=None) -> list[np.ndarray]:
    """The embeddings of `requests` ((file, binarized segmentations) pairs) on the split path `call`'s levers pick
    (its `trunk_blocks`, `skip_covered`, `half_precision`), each request's work counted in `works`."""
    for work in works:
        work.path = path_name(call, across_units)
    sources = None
    if call.skip_covered:
        step = adapter.segmentation_inference(pipeline).model.receptive_field.step
        sources = []
        for _, binarized in requests:
            num_chunks, _, num_speakers = binarized.data.shape
            active = pooling_weights(pipeline, binarized, exclude_overlap).any(axis=1).reshape(num_chunks, num_speakers)
            sources.append(covered_sources(binarized.data, active, frame_shift(binarized, step)))
    if call.trunk_blocks:
        return trunk_block_embeddings(pipeline, requests, exclude_overlap, works, call.half_precision, sources)
    return shared_trunk_embeddings(pipeline, requests, exclude_overlap, works, call.half_precision, hook, sources)
