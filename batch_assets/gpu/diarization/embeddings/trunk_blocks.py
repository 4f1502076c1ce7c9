"""Approximate lever A (`embedding_trunk_blocks_enabled`, off by default): the embedding trunk once over each
second of a unit, every chunk's speakers pooled from those frames.

community-1 slides 10 s chunks by 1 s, so the exact paths (stock, and lever 4's shared trunk) put every second of
speech through the embedding trunk about ten times, once per chunk that holds it. Here the trunk
(`forward_frames`) runs once over the unit in blocks: the whole unit when it is at most `BLOCK_S` long, else blocks
of `BLOCK_S` each computed with `CONTEXT_S` of audio either side (and those frames dropped), so the frames are one
sequence on the unit's clock. Each chunk takes the frames that start nearest its own start, as many as the trunk
gives a chunk, and each of its active speakers is pooled from them (`forward_embedding`) with the weights stock
chooses (`pooling.pooling_weights`), resampled to those frames as stock pooling resamples them; frames past
the unit's end (stock pads the last chunk with zeros) get weight zero.

What moves, and why it is approximate: a frame's value depends on the audio around it (the trunk's receptive
field: at a chunk's edges stock pads, here the unit's audio goes on) and on what the features normalise per input
(WeSpeaker subtracts the mean filterbank over its input, the x-vector's MFCC floors its decibels 80 dB under its
input's loudest bin: a chunk's in stock, the block's here), so embeddings differ from stock's by a little
everywhere (community-1-shaped, 20 s of the sample: pair cosine >= 0.98 to stock's); a chunk's first frame may be
half a frame off its start (ResNet34's 80 ms frames do not divide community-1's 1 s step). Turns change only where
that moves a pair to another cluster. The gate for approximate levers (`gate/compare.py`) measures it.

Work counted: `trunk_forwards` are blocks, `trunk_seconds` the audio through the trunk (about the unit's length,
against about ten times it on the exact paths). Needs a model that splits into `forward_frames` and
`forward_embedding` (`pooling.split_problem`).
"""

from __future__ import annotations

import numpy as np

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.gpu.device.precision import autocast
from batch_assets.gpu.diarization.embeddings.interface import EmbeddingPath, EmbeddingRequest, EmbeddingWork
from batch_assets.gpu.diarization.embeddings.pooling import active_pairs, pooling_weights, zero_embeddings

BLOCK_S = 60.0  # longest stretch through the trunk in one forward (memory), and blocks' length past it
CONTEXT_S = 2.0  # audio either side of a block of a longer unit, its frames dropped: the trunk's context
TRUNK_BLOCKS = "trunk blocks (approximate)"
BATCH_AUDIO_S = 320.0  # most audio seconds of equal-length blocks in one forward (stock's batch: 32 x 10 s chunks)


def frame_hop(model) -> int:
    """Samples between two trunk frames."""
    return int(model.receptive_field_center(1) - model.receptive_field_center(0))


def blocks(num_samples: int, hop: int, sample_rate: int) -> list[tuple[int, int, int, int]]:
    """(input start, input end, first kept frame, frames kept) for each block of a unit of `num_samples`, the frame
    indices on the unit's clock (frame `g` starts at sample `g * hop`)."""
    block, context = (int(round(seconds * sample_rate / hop)) * hop for seconds in (BLOCK_S, CONTEXT_S))
    if num_samples <= block:
        return [(0, num_samples, 0, -1)]  # -1: every frame the trunk gives
    out = []
    for start in range(0, num_samples, block):
        end = min(start + block, num_samples)
        lo, hi = max(0, start - context), min(num_samples, end + context)
        out.append((lo, hi, start // hop, -1 if end == num_samples else (end - start) // hop))
    return out


def unit_frames(pipeline, waveform, half_precision: bool, work: EmbeddingWork):
    """The trunk's frames over one unit's (channels, samples) waveform, (1, ..., frames) on the unit's clock."""
    import torch

    inference, model = adapter.embedding_inference(pipeline), adapter.embedding_model(pipeline)
    hop, sample_rate = frame_hop(model), inference.sample_rate
    minimum = max(int(inference.min_num_samples), hop)
    if waveform.shape[-1] < minimum:  # too short for one frame: zeros after it, as stock pads its chunks
        waveform = torch.nn.functional.pad(waveform, (0, minimum - waveform.shape[-1]))
    pieces: list = []
    plan = blocks(waveform.shape[-1], hop, sample_rate)
    groups: dict[int, list[int]] = {}  # equal-length blocks share forwards
    for i, (lo, hi, _, _) in enumerate(plan):
        groups.setdefault(hi - lo, []).append(i)
    outputs: dict[int, object] = {}
    for length, members in groups.items():
        per_batch = max(1, int(BATCH_AUDIO_S * sample_rate // length))
        for k in range(0, len(members), per_batch):
            batch = members[k : k + per_batch]
            inputs = torch.stack([waveform[:, plan[i][0] : plan[i][1]] for i in batch])
            with torch.inference_mode(), autocast(inference.device, half_precision, "embedding"):
                frames = model.forward_frames(inputs.to(inference.device)).float()
            work.trunk_forwards += len(batch)
            work.trunk_seconds += len(batch) * length / sample_rate
            for j, i in enumerate(batch):
                outputs[i] = frames[j : j + 1]
    for i, (lo, _, first, kept) in enumerate(plan):
        frames = outputs[i]
        skip = first - lo // hop  # the context's frames before the block
        pieces.append(frames[..., skip:] if kept < 0 else frames[..., skip : skip + kept])
    return torch.cat(pieces, dim=-1)


class TrunkBlocksPath(EmbeddingPath):
    """Lever A: the trunk once over each unit, in blocks (`unit_frames`), every chunk's active pairs pooled from
    the frames nearest the chunk; `half_precision`: the trunk under autocast."""

    batches_units = True  # takes a flight's requests in one call, each unit's blocks its own forwards

    def __init__(self, half_precision: bool = False):
        self.half_precision = half_precision

    def name(self, across_units: bool) -> str:
        return TRUNK_BLOCKS

    def embed(self, pipeline, requests: list[EmbeddingRequest], exclude_overlap: bool, across_units: bool = False,
              hook=None, skip: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """`skip`'s pairs are not pooled (they keep the zero-weight vector, the caller's to fill)."""
        return [self._one(pipeline, request, exclude_overlap, across_units, None if skip is None else skip[r])
                for r, request in enumerate(requests)]

    def _one(self, pipeline, request: EmbeddingRequest, exclude_overlap: bool, across_units: bool,
             skip: np.ndarray | None) -> np.ndarray:
        import torch
        import torch.nn.functional as F

        inference, model = adapter.embedding_inference(pipeline), adapter.embedding_model(pipeline)
        hop, sample_rate = frame_hop(model), inference.sample_rate
        work, binarized = request.work, request.binarized
        work.path = self.name(across_units)
        num_speakers = binarized.data.shape[2]
        weights = pooling_weights(pipeline, binarized, exclude_overlap)  # (chunks * speakers, frames)
        active = active_pairs(weights, binarized)
        work.active_pairs = int(active.sum())
        if skip is not None:
            active = active & ~skip
        window = binarized.sliding_window
        chunk_frames = model.num_frames(round(window.duration * sample_rate))
        waveform = torch.as_tensor(request.file["waveform"]).float()
        frames = unit_frames(pipeline, waveform, self.half_precision, work)  # (1, ..., total frames)
        total = frames.shape[-1]
        result = zero_embeddings(model, num_speakers, weights, active, frames[..., :chunk_frames])
        pair_chunks, pair_speakers = np.nonzero(active)
        size = pipeline.embedding_batch_size * max(1, num_speakers)
        with torch.inference_mode():
            for k in range(0, len(pair_chunks), size):
                chunks, speakers = pair_chunks[k : k + size], pair_speakers[k : k + size]
                starts = np.rint([window[c].start * sample_rate / hop for c in chunks]).astype(np.int64)
                index = torch.from_numpy(starts[:, None] + np.arange(chunk_frames)[None, :])  # (pairs, frames)
                valid = (index < total).float()
                pair_weights = torch.from_numpy(weights[chunks * num_speakers + speakers])[:, None, :]
                pair_weights = F.interpolate(pair_weights, size=chunk_frames, mode="nearest")[:, 0] * valid
                keep = (pair_weights.sum(dim=1) > 0).numpy()  # all its weight past the end: the zero-weight vector
                if keep.any():
                    picked = index.clamp(max=total - 1)[torch.from_numpy(keep)].to(frames.device)
                    gathered = frames[0][..., picked].movedim(-2, 0)  # (pairs, ..., frames)
                    pooled = model.forward_embedding(
                        gathered, weights=pair_weights[torch.from_numpy(keep)].to(frames.device))
                    result[chunks[keep], speakers[keep]] = pooled.float().cpu().numpy()
                work.pooled_pairs += int(keep.sum())
        return result
