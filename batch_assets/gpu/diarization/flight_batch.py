"""Lever 5: the segmentation model's forwards batched across the units of a flight.

Stock pyannote slides its segmentation model over one file at a time, so a short unit fills a batch or two,
the last one a single padded chunk: on a GPU each forward is launch-bound. `segment_files` cuts every file
exactly as `Inference.slide` does (`pyannote_adapter.slide_chunks`: views of the waveform, so a long unit's or a
call's channels' chunks are never all copied at once), fills `batch_size`-chunk batches with the chunks of all the
files in order, runs the same `Inference.infer` (model, powerset conversion), and splits the
outputs back per file, as the same `SlidingWindowFeature` stock returns. The embedding trunk's batches span
units in `shared_trunk.SharedTrunkPath`.

Exactness: each chunk goes through the same operations; only the batch it shares changes. Where a kernel
depends on the batch's size or neighbours (the LSTM's on some CPUs, cuDNN's algorithm choice), the raw scores
may move in their last bits; a powerset model's scores are its argmax one-hot, so the decisions do not
move, and the tests assert identical turns and labels.
"""

from __future__ import annotations

import numpy as np

from batch_assets.gpu.adapters import pyannote_adapter as adapter


def segment_files(inference, files: list[dict]) -> list[object]:
    """Each file's (chunks, frames, local speakers) segmentation scores, in the order of `files`, batched across
    files."""
    import torch
    from pyannote.audio.utils.reproducibility import fix_reproducibility
    from pyannote.core import SlidingWindow, SlidingWindowFeature

    fix_reproducibility(inference.device)
    cut = [adapter.slide_chunks(inference, inference.model.audio(file)[0]) for file in files]
    counts = [sum(len(part) for part in parts) for parts in cut]
    outputs, batch, size = [], [], 0
    for part in (part for parts in cut for part in parts):  # each batch copied out of the files' chunk views, in
        start = 0  # order: the batches of all the chunks concatenated, never all the chunks at once
        while start < len(part):
            take = min(inference.batch_size - size, len(part) - start)
            batch.append(part[start : start + take])
            size, start = size + take, start + take
            if size == inference.batch_size:
                outputs.append(inference.infer(torch.cat(batch)))
                batch, size = [], 0
    if batch:
        outputs.append(inference.infer(torch.cat(batch)))
    scores = np.vstack(outputs) if outputs else np.zeros((0,))
    window = SlidingWindow(start=0.0, duration=inference.duration, step=inference.step)
    edges = np.cumsum([0, *counts])
    return [SlidingWindowFeature(scores[a:b], window) for a, b in zip(edges[:-1], edges[1:], strict=True)]
