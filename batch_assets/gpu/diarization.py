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
- `get_embeddings` (lever 4, the shared trunk, `gpu/shared_trunk.py`): models that split into a trunk
  (`forward_frames`) and statistics pooling with a head (`forward_embedding`) run the trunk once per chunk
  with an active speaker and pool only the active pairs, instead of the whole network once per (chunk,
  local speaker) pair. The mask each pair uses (overlap-free when long enough) is chosen exactly as stock
  does. Any other model, or the pipeline in training mode, runs stock `get_embeddings`, and the reason is
  recorded. `EmbeddingWork` counts what ran, on both paths.
- the approximate levers A and B (off by default; `embedding_step.py`) take the same split path and change
  results by design: A puts each second through the trunk once (`trunk_blocks.py`), B gives a chunk speaker
  covered by a neighbour chunk's same speaker that speaker's embedding (`covered_pairs.py`). The bitwise
  paragraph below is about the exact path only.

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
import time

import numpy as np

from batch_assets.gpu import pyannote_adapter as adapter
from batch_assets.models.environment import quiet_model_libraries

quiet_model_libraries()

from pyannote.audio.pipelines import SpeakerDiarization  # noqa: E402

from batch_assets.gpu.embedding_step import split_embeddings, takes_split_path  # noqa: E402
from batch_assets.gpu.shared_trunk import (  # noqa: E402
    STOCK_SWITCHED_OFF,
    EmbeddingWork,
    pooling_weights,
    shared_trunk_problem,
)
from batch_assets.gpu.vad import as_pyannote_file  # noqa: E402
from batch_assets.ingest.speaker_hints import NO_HINTS, SpeakerHints  # noqa: E402


@dataclasses.dataclass
class DiarizationCall:
    """One unit's diarization call, carried in the pyannote file dict (`CALL_KEY`), so that the pipeline holds no
    per-call state and the host work of one unit may run while the device work of the next one does (lever 6).

    In: `vad_scores` (offered by VAD, lever 2), `segmentations` and `embeddings` (the device work already done
    for this call: `precompute_device_work`, levers 5 and 6), `shared_trunk` (lever 4), `half_precision`, and the
    approximate levers `trunk_blocks` (A) and `skip_covered` (B) (`embedding_step.py`).
    Out: what the steps did: `reuse`, `embedding_work`, and `device_s`, the seconds this call's own steps spent in
    model forwards (the rest of the call is host work: clustering, reconstruction)."""

    shared_trunk: bool = True
    half_precision: bool = False
    trunk_blocks: bool = False
    skip_covered: bool = False
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
    _embedding_rows: list[int]  # rows through the embedding model's forward (the stock path's work), set by
    # make_levered

    # -- lever 2 (and precomputed segmentations) ---------------------------------------------------
    def _mismatch(self, scores, file) -> str | None:
        inference = adapter.segmentation_inference(self)
        window = scores.sliding_window
        if not np.isclose(window.duration, inference.duration) or not np.isclose(window.step, inference.step):
            return f"window {window.duration}/{window.step} s != {inference.duration}/{inference.step} s"
        num_samples = file["waveform"].shape[-1]
        frames = inference.model.num_frames(round(inference.duration * file["sample_rate"]))
        expected_chunks = max(1, int(np.ceil(max(0.0, num_samples / file["sample_rate"] - inference.duration)
                                             / inference.step)) + 1)
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
                pre.binarized is binary_segmentations.data
                or (pre.binarized.shape == binary_segmentations.data.shape
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
        if not takes_split_path(call) or problem:
            work.path = STOCK_SWITCHED_OFF if not takes_split_path(call) else f"stock (fallback: {problem})"
            if exclude_overlap:
                adapter.embedding_inference(self).min_num_samples  # noqa: B018 (its probing forwards are not the
                # step's work)
            before = self._embedding_rows[0]
            embeddings = super().get_embeddings(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
            # measured by the model's forward hook; an embedding that is not a torch model embeds every pair
            counted = self._embedding_rows[0] - before if adapter.embedding_model(self) is not None else work.pairs
            work.trunk_forwards = work.pooled_pairs = counted
            work.trunk_seconds = counted * binary_segmentations.sliding_window.duration
            work.active_pairs = int(np.count_nonzero(
                pooling_weights(self, binary_segmentations, exclude_overlap).any(axis=1)))
            return embeddings
        return split_embeddings(self, [(file, binary_segmentations)], exclude_overlap, [work], call, hook=hook)[0]


def make_levered(pipeline: SpeakerDiarization) -> LeveredSpeakerDiarization:
    """Turn a loaded pipeline (production or builtin) into the levered subclass; it adds only a counter of the
    stock embedding path's forwards."""
    if not isinstance(pipeline, SpeakerDiarization):
        raise TypeError(f"expected a pyannote SpeakerDiarization pipeline, got {type(pipeline).__name__}")
    pipeline.__class__ = LeveredSpeakerDiarization
    rows = [0]
    model = adapter.embedding_model(pipeline)
    if model is not None:  # counts the stock path's work: every row through the embedding model's forward
        model.register_forward_hook(
            lambda _module, args, _out: rows.__setitem__(0, rows[0] + (len(args[0]) if args else 0)))
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
        embeddings = {label: np.asarray(output.speaker_embeddings[i], dtype=np.float32)
                      for i, label in enumerate(labels)}
    return DiarizationResult(
        turns=_turns(output.speaker_diarization),
        exclusive_turns=_turns(output.exclusive_speaker_diarization),
        embeddings=embeddings,
        reuse=call.reuse,
        embedding_work=call.embedding_work,  # stays "not run" when pyannote exits early (no speaker active)
    )


@dataclasses.dataclass
class HostSeconds:
    """Seconds of host work a phase has done so far: kept as they accrue, so a phase that raises part-way still
    reports the host work it did (the caller books the rest of the phase's time as device work)."""

    seconds: float = 0.0


def precompute_device_work(pipeline: LeveredSpeakerDiarization, files: list[dict], across_units: bool,
                           host: HostSeconds) -> None:
    """The device work of several units' calls, done before the calls (levers 5 and 6): each file's call gets its
    `segmentations` (VAD's when reused, else a forward: batched across the files with `across_units`) and, when a
    speaker is active, its `embeddings` (the shared trunk batched across the files with `across_units`). The
    calls then run only host work, and check that what they would have computed is what they were given.
    Adds to `host` the seconds of host work it does on the way (binarizing and counting speakers, to pick the
    embeddings), each as it is done: if a later forward raises, the host seconds before it are still there."""
    from batch_assets.gpu.flight_batch import segment_files

    calls = [call_of(f) for f in files]
    need = []
    for file, call in zip(files, calls, strict=True):
        problem = "not offered" if call.vad_scores is None else pipeline._mismatch(call.vad_scores, file)
        need.append(problem is not None)
        if problem is not None and across_units and call.vad_scores is not None:
            call.reuse = f"fallback: {problem}"
    batched = None
    if across_units and any(need):
        needed = [file for file, needs in zip(files, need, strict=True) if needs]
        batched = iter(segment_files(adapter.segmentation_inference(pipeline), needed))
    for file, call, needs in zip(files, calls, need, strict=True):
        # batched, else reused or one forward (timed by the step)
        call.segmentations = next(batched) if batched is not None and needs else pipeline.get_segmentations(file)
    requests, works = [], []
    exclude = pipeline.embedding_exclude_overlap
    for file, call in zip(files, calls, strict=True):
        started = time.perf_counter()
        binarized = adapter.binarized_segmentations(pipeline, call.segmentations)
        count = pipeline.speaker_count(binarized, adapter.segmentation_inference(pipeline).model.receptive_field,
                                       warm_up=(0.0, 0.0))
        host.seconds += time.perf_counter() - started
        if np.nanmax(count.data) == 0.0:
            continue  # pyannote exits early: no embeddings
        if across_units and takes_split_path(call) and not pipeline.training and shared_trunk_problem(pipeline) is None:
            requests.append((file, binarized))
            num_chunks, _, num_speakers = binarized.data.shape
            works.append(EmbeddingWork(chunks=num_chunks, pairs=num_chunks * num_speakers))
        else:
            embeddings = pipeline.get_embeddings(file, binarized, exclude_overlap=exclude)
            call.embeddings = PrecomputedEmbeddings(binarized.data, exclude, embeddings, call.embedding_work)
    if requests:  # a flight's calls share the run's levers
        embedded = split_embeddings(pipeline, requests, exclude, works, call_of(requests[0][0]), across_units=True)
        for (file, binarized), work, embeddings in zip(requests, works, embedded, strict=True):
            call = call_of(file)
            call.embedding_work = work
            call.embeddings = PrecomputedEmbeddings(binarized.data, exclude, embeddings, work)
    for call in calls:  # the caller times this phase; from here a call's device seconds are its own call's forwards
        call.device_s = 0.0
