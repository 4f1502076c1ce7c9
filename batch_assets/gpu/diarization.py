"""pyannote's `SpeakerDiarization` with its levers, each an override of one of its public steps.

`LeveredSpeakerDiarization` keeps no per-call state (what a call is offered and what its steps did travel
in the file it is given, as a `DiarizationCall`, so one unit's host work may run while the next unit's
device work does: lever 6) and changes no result:

- `get_segmentations` (lever 2): uses scores offered by the VAD pass instead of running the
  segmentation model a second time, when they match what the pipeline would compute (shape, window,
  step). Anything else falls back to a fresh forward, and the fallback is recorded. The scores come from
  the very same `Inference` object, so results are identical.
- precomputed forwards (levers 5 and 6): `precompute_device_work` runs several calls' segmentation and
  embedding forwards before the calls (lever 5: batched across the units); `get_segmentations` and
  `get_embeddings` then hand them back, the embeddings only for the exact binarized segmentation they were
  computed from, so a call is left with host work only (clustering, reconstruction).
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
ResNet34 on this CPU with 5 s chunks: every pair; with 10 s chunks 97 % of them, the rest within 1.2e-7).
Stock batches 32 pairs, the shared trunk 32
chunks and the pooled pairs of those: kernels that do depend on it move the last float bits (the tiny
x-vector's MFCC/TDNN on this CPU: one centroid of the sample's 13 units by 1.2e-7; on CUDA, cuDNN and
cuBLAS may pick other algorithms for another batch shape). Turns and labels stayed identical in every
test and bench run; the gate (same words, same speakers) is the check wherever bits can move.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from batch_assets.gpu import pyannote_adapter as adapter
from batch_assets.models.environment import quiet_model_libraries

quiet_model_libraries()

from pyannote.audio.pipelines import SpeakerDiarization  # noqa: E402

from batch_assets.gpu.vad import as_pyannote_file  # noqa: E402
from batch_assets.speaker_hints import NO_HINTS, SpeakerHints  # noqa: E402

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


@dataclasses.dataclass
class DiarizationCall:
    """One unit's diarization call, carried in the pyannote file dict (`CALL_KEY`), so that the pipeline holds no
    per-call state and the host work of one unit may run while the device work of the next one does (lever 6).

    In: `vad_scores` (offered by VAD, lever 2), `segmentations` and `embeddings` (the device work already done
    for this call: `precompute_device_work`, levers 5 and 6), `shared_trunk` (lever 4), `half_precision`.
    Out: what the steps did: `reuse`, `embedding_work`, and `device_s`, the seconds this call's own steps spent in
    model forwards (the rest of the call is host work: clustering, reconstruction)."""

    shared_trunk: bool = True
    half_precision: bool = False
    vad_scores: object | None = None
    segmentations: object | None = None
    embeddings: PrecomputedEmbeddings | None = None
    reuse: str = "not offered"
    embedding_work: EmbeddingWork = dataclasses.field(default_factory=EmbeddingWork)
    device_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class PrecomputedEmbeddings:
    """Embeddings computed before the call, for these binarized segmentations (the very array `apply` passes, or
    one equal to it: checked before they are used; pyannote's steps only read it)."""

    binarized: np.ndarray
    exclude_overlap: bool
    embeddings: np.ndarray
    work: EmbeddingWork


CALL_KEY = "batch_assets_call"


def call_of(file) -> DiarizationCall:
    call = file.get(CALL_KEY) if hasattr(file, "get") else None
    return call if call is not None else DiarizationCall()


class LeveredSpeakerDiarization(SpeakerDiarization):
    _embedding_rows: list[int]  # rows through the embedding model's forward (the stock path's work), set by make_levered

    # -- lever 2 (and precomputed segmentations) ---------------------------------------------------
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
        call = call_of(file)
        if call.segmentations is not None:  # computed (or reused) before the call
            return call.segmentations
        if call.vad_scores is not None:
            problem = self._mismatch(call.vad_scores, file)
            if problem is None:
                call.reuse = "reused"
                return call.vad_scores
            call.reuse = f"fallback: {problem}"
        started = time.perf_counter()
        segmentations = super().get_segmentations(file, hook=hook)
        call.device_s += time.perf_counter() - started
        return segmentations

    # -- lever 4 (and precomputed embeddings) ------------------------------------------------------
    def get_embeddings(self, file, binary_segmentations, exclude_overlap: bool = False, hook=None):
        call = call_of(file)
        pre = call.embeddings
        if pre is not None and pre.exclude_overlap == exclude_overlap and (
                pre.binarized is binary_segmentations.data or (pre.binarized.shape == binary_segmentations.data.shape
                                                               and np.array_equal(pre.binarized, binary_segmentations.data, equal_nan=True))):
            call.embedding_work = pre.work
            return pre.embeddings
        started = time.perf_counter()
        try:
            return self._embed(file, binary_segmentations, exclude_overlap, hook, call)
        finally:
            call.device_s += time.perf_counter() - started

    def _embed(self, file, binary_segmentations, exclude_overlap: bool, hook, call: DiarizationCall):
        num_chunks, _, num_speakers = binary_segmentations.data.shape
        work = EmbeddingWork(chunks=num_chunks, pairs=num_chunks * num_speakers)
        call.embedding_work = work
        problem = "pipeline in training mode (stock embeddings cache)" if self.training else shared_trunk_problem(self)
        if not call.shared_trunk or problem:
            work.path = STOCK_SWITCHED_OFF if not call.shared_trunk else f"stock (fallback: {problem})"
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
        return shared_trunk_embeddings(self, [(file, binary_segmentations)], exclude_overlap, [work], call.half_precision, hook)[0]


def shared_trunk_embeddings(pipeline, requests, exclude_overlap: bool, works: list[EmbeddingWork], half_precision: bool = False,
                            hook=None) -> list[np.ndarray]:
    """Lever 4 over one or several files (lever 5: the chunks of a flight's units fill the same batches).

    `requests`: (file, binarized segmentations) pairs; returns each one's (chunks, local speakers, dimension)
    embeddings and counts its work in `works`. Each chunk with an active speaker runs the trunk once; each active
    pair is pooled from its chunk's frames; a pair with all-zero weights gets what stock pooling gives it."""
    import torch

    from batch_assets.gpu.precision import autocast

    inference, model = adapter.embedding_inference(pipeline), adapter.embedding_model(pipeline)
    plans = []
    for (file, binary_segmentations), work in zip(requests, works, strict=True):
        num_chunks, _, num_speakers = binary_segmentations.data.shape
        weights = _pair_weights(pipeline, binary_segmentations, exclude_overlap)  # (chunks * speakers, frames)
        active = weights.any(axis=1).reshape(num_chunks, num_speakers)
        work.active_pairs = int(active.sum())
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
                if out[r] is None:  # what stock pooling gives a pair with all-zero weights
                    zero = model.forward_embedding(frames[rows[0] : rows[0] + 1],
                                                   weights=torch.zeros(1, weights.shape[1], device=frames.device))
                    zero = zero.cpu().numpy()[0]
                    out[r] = np.empty((len(active), num_speakers, zero.shape[-1]), dtype=zero.dtype)
                    out[r][:] = zero
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
    return [o if o is not None else _zero_embeddings(pipeline, plans[r], frames) for r, o in enumerate(out)]


def _zero_embeddings(pipeline, plan, frames) -> np.ndarray:
    """A request with no active pair (its chunks never reached a batch): every pair gets the zero-weight vector."""
    import torch

    model = adapter.embedding_model(pipeline)
    _, _, weights, active, num_speakers = plan
    with torch.inference_mode():
        zero = model.forward_embedding(frames[:1], weights=torch.zeros(1, weights.shape[1], device=frames.device)).cpu().numpy()[0]
    out = np.empty((len(active), num_speakers, zero.shape[-1]), dtype=zero.dtype)
    out[:] = zero
    return out


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
    """Turn a loaded pipeline (production or builtin) into the levered subclass; it adds only a counter of the
    stock embedding path's forwards."""
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


def diarization_file(waveform: np.ndarray, uri: str, call: DiarizationCall) -> dict:
    """The pyannote file for one unit's call, the call carried in it."""
    return as_pyannote_file(waveform, uri) | {CALL_KEY: call}


def diarize(pipeline: LeveredSpeakerDiarization, waveform: np.ndarray, uri: str, vad_scores=None,
            shared_trunk: bool = True, hints: SpeakerHints = NO_HINTS, call: DiarizationCall | None = None,
            file: dict | None = None) -> DiarizationResult:
    """One unit's diarization; `hints` (speaker counts) go to the pipeline as its own arguments. `call` (and its
    `file`) may carry device work already done (`precompute_device_work`); without, the call does it all."""
    call = call or DiarizationCall(shared_trunk=shared_trunk, vad_scores=vad_scores)
    file = file or diarization_file(waveform, uri, call)
    output = pipeline(file, **hints.pipeline_kwargs())
    labels = output.speaker_diarization.labels()
    embeddings = {}
    if output.speaker_embeddings is not None:
        embeddings = {label: np.asarray(output.speaker_embeddings[i], dtype=np.float32) for i, label in enumerate(labels)}
    return DiarizationResult(
        turns=_turns(output.speaker_diarization),
        exclusive_turns=_turns(output.exclusive_speaker_diarization),
        embeddings=embeddings,
        reuse=call.reuse,
        embedding_work=call.embedding_work,  # stays "not run" when pyannote exits early (no speaker active)
    )


def precompute_device_work(pipeline: LeveredSpeakerDiarization, files: list[dict], across_units: bool) -> None:
    """The device work of several units' calls, done before the calls (levers 5 and 6): each file's call gets its
    `segmentations` (VAD's when reused, else a forward: batched across the files with `across_units`) and, when a
    speaker is active, its `embeddings` (the shared trunk batched across the files with `across_units`). The
    calls then run only host work, and check that what they would have computed is what they were given."""
    from batch_assets.gpu.flight_batch import segment_files

    calls = [call_of(f) for f in files]
    need = []
    for file, call in zip(files, calls, strict=True):
        problem = "not offered" if call.vad_scores is None else pipeline._mismatch(call.vad_scores, file)
        if problem is not None:
            need.append(file)
            if across_units and call.vad_scores is not None:
                call.reuse = f"fallback: {problem}"
    fresh = segment_files(adapter.segmentation_inference(pipeline), need) if across_units and need else {}
    for file, call in zip(files, calls, strict=True):
        if id(file) in fresh:
            call.segmentations = fresh[id(file)]
        else:
            call.segmentations = pipeline.get_segmentations(file)  # reused, or one forward (timed by the step)
    requests, works = [], []
    exclude = pipeline.embedding_exclude_overlap
    for file, call in zip(files, calls, strict=True):
        binarized = adapter.binarized_segmentations(pipeline, call.segmentations)
        count = pipeline.speaker_count(binarized, adapter.segmentation_inference(pipeline).model.receptive_field, warm_up=(0.0, 0.0))
        if np.nanmax(count.data) == 0.0:
            continue  # pyannote exits early: no embeddings
        if across_units and call.shared_trunk and not pipeline.training and shared_trunk_problem(pipeline) is None:
            requests.append((file, binarized))
            num_chunks, _, num_speakers = binarized.data.shape
            works.append(EmbeddingWork(path=SHARED_TRUNK_ACROSS_UNITS, chunks=num_chunks, pairs=num_chunks * num_speakers))
        else:
            embeddings = pipeline.get_embeddings(file, binarized, exclude_overlap=exclude)
            call.embeddings = PrecomputedEmbeddings(binarized.data, exclude, embeddings, call.embedding_work)
    if requests:
        half = any(call_of(f).half_precision for f, _ in requests)
        embedded = shared_trunk_embeddings(pipeline, requests, exclude, works, half)
        for (file, binarized), work, embeddings in zip(requests, works, embedded, strict=True):
            call = call_of(file)
            call.embedding_work = work
            call.embeddings = PrecomputedEmbeddings(binarized.data, exclude, embeddings, work)
    for call in calls:  # the caller times this phase; from here a call's device seconds are its own call's forwards
        call.device_s = 0.0
