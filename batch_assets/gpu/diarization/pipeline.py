"""pyannote's `SpeakerDiarization` with its levers, each an override of one of its public steps.

`LeveredSpeakerDiarization` keeps no per-call state (what a call is offered and what its steps did travel
in the file it is given, as a `DiarizationCall`, so one unit's host work may run while the next unit's
device work does: lever 6) and changes no result:

- `get_segmentations` (lever 2): uses scores offered by the VAD pass instead of running the
  segmentation model a second time, when they match what the pipeline would compute (shape, window,
  step). Anything else falls back to a fresh forward, and the fallback is recorded. The scores come from
  the very same `Inference` object, so results are identical.
- precomputed forwards (levers 5 and 6): `precompute.py` runs several calls' segmentation and
  embedding forwards before the calls (lever 5: batched across the units); `get_segmentations` and
  `get_embeddings` then hand them back, the embeddings only for the exact binarized segmentation they were
  computed from, so a call is left with host work only (clustering, reconstruction).
- `get_embeddings` (the embedding paths, `embeddings/`): the call's levers pick one `EmbeddingPath`
  (`embeddings/choice.py`): stock, lever 4's shared trunk (models that split into a trunk, `forward_frames`, and
  statistics pooling with a head, `forward_embedding`, run the trunk once per chunk with an active speaker and
  pool only the active pairs, instead of the whole network once per (chunk, local speaker) pair; the mask each
  pair uses, overlap-free when long enough, is chosen exactly as stock does), and the approximate levers A
  (trunk blocks) and B (covered pairs copied), which change results by design. Any other model, or the pipeline
  in training mode, runs stock `get_embeddings`, and the reason is recorded. `EmbeddingWork` counts what ran, on
  every path. The bitwise paragraph below is about the exact paths only.

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

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.gpu.device.faults import raise_if_device_fault
from batch_assets.models.environment import quiet_model_libraries

quiet_model_libraries()

from pyannote.audio.pipelines import SpeakerDiarization  # noqa: E402

from batch_assets.gpu.diarization.embeddings.choice import embedding_path  # noqa: E402
from batch_assets.gpu.diarization.embeddings.interface import EmbeddingRequest, EmbeddingWork  # noqa: E402
from batch_assets.gpu.diarization.embeddings.stock import count_forwards  # noqa: E402
from batch_assets.gpu.diarization.vad import as_pyannote_file  # noqa: E402
from batch_assets.ingest.speaker_hints import NO_HINTS, SpeakerHints  # noqa: E402


@dataclasses.dataclass
class DiarizationCall:
    """One unit's diarization call, carried in the pyannote file dict (`CALL_KEY`), so that the pipeline holds no
    per-call state and the host work of one unit may run while the device work of the next one does (lever 6).

    In: `vad_scores` (offered by VAD, lever 2), `segmentations` and `embeddings` (the device work already done
    for this call: `precompute.py`, levers 5 and 6), `shared_trunk` (lever 4), `half_precision`, and the
    approximate levers `trunk_blocks` (A) and `skip_covered` (B) (`embeddings/choice.py`).
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

    # -- the embedding paths (and precomputed embeddings) -------------------------------------------
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
        request = EmbeddingRequest(file, binary_segmentations)
        call.embedding_work = request.work
        try:
            return embedding_path(call, self).embed(self, [request], exclude_overlap, hook=hook)[0]
        finally:
            call.device_s += time.perf_counter() - started


def make_levered(pipeline: SpeakerDiarization) -> LeveredSpeakerDiarization:
    """Turn a loaded pipeline (production or builtin) into the levered subclass; it adds only a counter of the
    stock embedding path's forwards (`embeddings/stock.py`)."""
    if not isinstance(pipeline, SpeakerDiarization):
        raise TypeError(f"expected a pyannote SpeakerDiarization pipeline, got {type(pipeline).__name__}")
    pipeline.__class__ = LeveredSpeakerDiarization
    count_forwards(pipeline)
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
    `file`) may carry device work already done (`precompute.py`); without, the call does it all."""
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
class UnitDiarization:
    """One unit's diarization call as `diarize_units` ran it: its result, or the reason it failed; its seconds in
    model forwards (`device_s`) and the rest of the call (`host_s`)."""

    result: DiarizationResult | None
    reason: str
    device_s: float
    host_s: float


def diarize_units(pipeline: LeveredSpeakerDiarization,
                  calls: dict[str, tuple[DiarizationCall, dict, SpeakerHints]]) -> dict[str, UnitDiarization]:
    """Each unit's diarization call (whole, or the host part of one whose forwards were precomputed), `calls` by
    unit: (call, file, hints). One unit's exception is that unit's result (its reason), unless the device's: a
    device fault raises (`device/faults.py`)."""
    out = {}
    for uid, (call, file, hints) in calls.items():
        started = time.perf_counter()
        result, reason = None, ""
        try:
            result = diarize(pipeline, None, uid, call=call, file=file, hints=hints)
        except Exception as error:  # one unit's failure is that unit's result, unless the device's
            raise_if_device_fault(error, f"diarization of {uid}")
            reason = f"{type(error).__name__}: {error}"[:500]
        out[uid] = UnitDiarization(result, reason, call.device_s, time.perf_counter() - started - call.device_s)
    return out
