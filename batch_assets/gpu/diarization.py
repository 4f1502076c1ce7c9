"""pyannote's `SpeakerDiarization` with two levers, each an override of one of its public steps.

`LeveredSpeakerDiarization` adds no state a stock pipeline lacks and changes no result:

- `get_segmentations` (lever 2): consumes scores offered by the VAD pass (once) instead of running the
  segmentation model a second time, when they match what the pipeline would compute (shape, window,
  step). Anything else falls back to a fresh forward, and the fallback is recorded. The scores come from
  the very same `Inference` object, so results are identical.
- `get_embeddings` (lever 4, the shared trunk): stock pyannote embeds every (chunk, local speaker) pair,
  running the whole embedding network on the chunk's audio once per pair, silent speakers included.
  Models that split into `forward_frames(waveforms)` (the trunk) and `forward_embedding(frames,
  weights)` (statistics pooling and head), as pyannote's WeSpeaker ResNets and our tiny x-vector do,
  run the trunk once per chunk that has an active speaker and pool only the pairs whose weights are
  not all zero. A pair whose weights are all zero gets what stock pooling computes for it: zero
  statistics through the head, identical for every such pair (it is computed once per call from real
  frames). The mask each pair uses (overlap-free when long enough) is chosen exactly as stock does.
  Any other model, or the pipeline in training mode, runs stock `get_embeddings`, and the reason is
  recorded. `EmbeddingWork` counts what ran, on both paths.

Bitwise: the trunk and the pooling compute each chunk and pair with the same operations as stock, so
the embeddings are identical where the backend's kernels do not depend on the batch size (WeSpeaker
ResNet34 on this CPU: every pair, asserted by the tests). Stock batches 32 pairs, the shared trunk 32
chunks and the pooled pairs of those: kernels that do depend on it move the last float bits (the tiny
x-vector's MFCC/TDNN on this CPU: one centroid of the sample's 13 units by 1.2e-7; on CUDA, cuDNN and
cuBLAS may pick other algorithms for another batch shape). Turns and labels stayed identical in every
test and bench run; the gate (same words, same speakers) is the check wherever bits can move.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from batch_assets.gpu import pyannote_adapter as adapter
from batch_assets.models.environment import quiet_model_libraries

quiet_model_libraries()

from pyannote.audio.pipelines import SpeakerDiarization  # noqa: E402

from batch_assets.gpu.vad import as_pyannote_file  # noqa: E402
from batch_assets.speaker_hints import NO_HINTS, SpeakerHints  # noqa: E402

SHARED_TRUNK = "shared trunk"
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

    def counts(self) -> dict[str, int]:
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


class LeveredSpeakerDiarization(SpeakerDiarization):
    _offered = None
    last_reuse: str = "not offered"
    embedding_shared_trunk: bool = True  # set per call by `diarize`
    last_embedding: EmbeddingWork = EmbeddingWork()
    _embedding_rows: list[int]  # rows through the embedding model's forward (the stock path's work)

    # -- lever 2 -----------------------------------------------------------------------------------
    def offer_segmentations(self, scores) -> None:
        self._offered = scores

    def _mismatch(self, scores, file) -> str | None:
        inference = adapter.segmentation_inference(self)
        window = scores.sliding_window
        if not np.isclose(window.duration, inference.duration) or not np.isclose(window.step, inference.step):
            return f"window {window.duration}/{window.step} s != {inference.duration}/{inference.step} s"
        num_samples = file["waveform"].shape[-1]
        frames = inference.model.num_frames(round(inference.duration * file["sample_rate"]))
        expected_chunks = max(1, int(np.ceil(max(0.0, num_samples / file["sample_rate"] - inference.duration) / inference.step)) + 1)
        if scores.data.ndim != 3 or scores.data.shape[1] != frames:
            return f"scores shape {scores.data.shape} has not {frames} frames per chunk"
        if abs(scores.data.shape[0] - expected_chunks) > 1:
            return f"{scores.data.shape[0]} chunks where {expected_chunks} were expected"
        return None

    def get_segmentations(self, file, hook=None):
        offered, self._offered = self._offered, None  # consume once
        if offered is None:
            self.last_reuse = "not offered"
            return super().get_segmentations(file, hook=hook)
        problem = self._mismatch(offered, file)
        if problem is not None:
            self.last_reuse = f"fallback: {problem}"
            return super().get_segmentations(file, hook=hook)
        self.last_reuse = "reused"
        return offered

    # -- lever 4 -----------------------------------------------------------------------------------
    def get_embeddings(self, file, binary_segmentations, exclude_overlap: bool = False, hook=None):
        num_chunks, _, num_speakers = binary_segmentations.data.shape
        work = EmbeddingWork(chunks=num_chunks, pairs=num_chunks * num_speakers)
        self.last_embedding = work
        problem = "pipeline in training mode (stock embeddings cache)" if self.training else shared_trunk_problem(self)
        if not self.embedding_shared_trunk or problem:
            work.path = STOCK_SWITCHED_OFF if not self.embedding_shared_trunk else f"stock (fallback: {problem})"
            if exclude_overlap:
                adapter.embedding_inference(self).min_num_samples  # noqa: B018 (its probing forwards are not the step's work)
            before = self._embedding_rows[0]
            embeddings = super().get_embeddings(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
            # measured by the model's forward hook; an embedding that is not a torch model embeds every pair
            counted = self._embedding_rows[0] - before if adapter.embedding_model(self) is not None else work.pairs
            work.trunk_forwards = work.pooled_pairs = counted
            work.active_pairs = int(np.count_nonzero(_pair_weights(self, binary_segmentations, exclude_overlap).any(axis=1)))
            return embeddings
        work.path = SHARED_TRUNK
        return self._shared_trunk_embeddings(file, binary_segmentations, exclude_overlap, hook, work)

    def _shared_trunk_embeddings(self, file, binary_segmentations, exclude_overlap, hook, work: EmbeddingWork):
        import torch

        inference, model = adapter.embedding_inference(self), adapter.embedding_model(self)
        num_chunks, _, num_speakers = binary_segmentations.data.shape
        weights = _pair_weights(self, binary_segmentations, exclude_overlap)  # (chunks * speakers, frames)
        active = weights.any(axis=1).reshape(num_chunks, num_speakers)
        work.active_pairs = int(active.sum())
        chunks = [c for c in range(num_chunks) if active[c].any()] or [0]  # chunk 0 only to get the zero-weight vector
        batches = [chunks[i : i + self.embedding_batch_size] for i in range(0, len(chunks), self.embedding_batch_size)]
        embeddings: np.ndarray | None = None
        if hook is not None:
            hook("embeddings", None, total=len(batches), completed=0)
        with torch.inference_mode():
            for i, batch in enumerate(batches, 1):
                waveforms = torch.vstack([adapter.crop(self, file, binary_segmentations.sliding_window[c])[None] for c in batch])
                frames = model.forward_frames(waveforms.to(inference.device))
                work.trunk_forwards += len(batch)
                if embeddings is None:  # what stock pooling gives a pair with all-zero weights
                    zero = model.forward_embedding(frames[:1], weights=torch.zeros(1, weights.shape[1], device=frames.device))
                    zero = zero.cpu().numpy()[0]
                    embeddings = np.empty((num_chunks, num_speakers, zero.shape[-1]), dtype=zero.dtype)
                    embeddings[:] = zero
                rows, speakers = np.nonzero(active[batch])
                if len(rows):
                    pair_chunks = np.asarray(batch)[rows]
                    pair_weights = torch.from_numpy(weights[pair_chunks * num_speakers + speakers]).to(frames.device)
                    pooled = model.forward_embedding(frames[torch.from_numpy(rows).to(frames.device)], weights=pair_weights)
                    embeddings[pair_chunks, speakers] = pooled.cpu().numpy()
                    work.pooled_pairs += len(rows)
                if hook is not None:
                    hook("embeddings", None, total=len(batches), completed=i)
        return embeddings


def _pair_weights(pipeline, binary_segmentations, exclude_overlap: bool) -> np.ndarray:
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


def make_levered(pipeline: SpeakerDiarization) -> LeveredSpeakerDiarization:
    """Turn a loaded pipeline (production or builtin) into the levered subclass; it adds only counters."""
    if not isinstance(pipeline, SpeakerDiarization):
        raise TypeError(f"expected a pyannote SpeakerDiarization pipeline, got {type(pipeline).__name__}")
    pipeline.__class__ = LeveredSpeakerDiarization
    rows = [0]
    model = adapter.embedding_model(pipeline)
    if model is not None:  # counts the stock path's work: every row through the embedding model's forward
        model.register_forward_hook(lambda _module, args, _out: rows.__setitem__(0, rows[0] + (len(args[0]) if args else 0)))
    pipeline._embedding_rows = rows
    return pipeline


@dataclasses.dataclass
class DiarizationResult:
    turns: list[tuple[float, float, str]]
    exclusive_turns: list[tuple[float, float, str]]
    embeddings: dict[str, np.ndarray]
    reuse: str
    embedding_work: EmbeddingWork = dataclasses.field(default_factory=EmbeddingWork)


def _turns(annotation) -> list[tuple[float, float, str]]:
    return [(float(seg.start), float(seg.end), str(label)) for seg, _, label in annotation.itertracks(yield_label=True)]


def diarize(pipeline: LeveredSpeakerDiarization, waveform: np.ndarray, uri: str, vad_scores=None,
            shared_trunk: bool = True, hints: SpeakerHints = NO_HINTS) -> DiarizationResult:
    """One unit's diarization; `hints` (speaker counts) go to the pipeline as its own arguments."""
    if vad_scores is not None:
        pipeline.offer_segmentations(vad_scores)
    pipeline.embedding_shared_trunk = shared_trunk
    pipeline.last_embedding = EmbeddingWork()  # stays "not run" when pyannote exits early (no speaker active)
    output = pipeline(as_pyannote_file(waveform, uri), **hints.pipeline_kwargs())
    labels = output.speaker_diarization.labels()
    embeddings = {}
    if output.speaker_embeddings is not None:
        embeddings = {label: np.asarray(output.speaker_embeddings[i], dtype=np.float32) for i, label in enumerate(labels)}
    return DiarizationResult(
        turns=_turns(output.speaker_diarization),
        exclusive_turns=_turns(output.exclusive_speaker_diarization),
        embeddings=embeddings,
        reuse=pipeline.last_reuse,
        embedding_work=pipeline.last_embedding,
    )
