"""A flight's diarization forwards done before its calls (levers 5 and 6), so that each call is left host work only.

`precompute_units` is the section's diarization device work with either lever on: every unit's segmentation
forward (VAD's scores when reused, else batched across the units with lever 5: `flight_batch.py`) and its
embedding step (the path the levers pick, `embeddings/choice.py`, across the units when it `batches_units`), each
put in the unit's `DiarizationCall`. When the batch raises (a unit's audio broke it), the units are redone one by
one, so that one bad unit stays one, its reason returned; a device fault raises (`device/faults.py`).
`pipeline.diarize_units` then runs the calls: clustering and reconstruction over these forwards, checked to be
what the calls would have computed.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.gpu.device.faults import raise_if_device_fault
from batch_assets.gpu.diarization.embeddings.choice import embedding_path
from batch_assets.gpu.diarization.embeddings.interface import EmbeddingRequest
from batch_assets.gpu.diarization.flight_batch import segment_files
from batch_assets.gpu.diarization.pipeline import LeveredSpeakerDiarization, PrecomputedEmbeddings, call_of


@dataclasses.dataclass
class FlightForwards:
    """What `precompute_units` did: the units whose forwards failed (unit -> reason), its seconds split into
    device work (forwards) and host work (binarizing, counting speakers), and whether the batch fell back to
    unit by unit."""

    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    device_s: float = 0.0
    host_s: float = 0.0
    batch_fallback: bool = False


def precompute_units(pipeline: LeveredSpeakerDiarization, files: dict[str, dict], across_units: bool) -> FlightForwards:
    """The forwards of the calls carried in `files` (by unit), batched across them with `across_units` (lever 5)."""
    started, host, out = time.perf_counter(), HostSeconds(), FlightForwards()
    try:
        precompute_device_work(pipeline, list(files.values()), across_units, host)
    except Exception as error:
        raise_if_device_fault(error, f"batched diarization forwards of {', '.join(files)}")
        out.batch_fallback = True
        for uid, file in files.items():
            call = call_of(file)
            call.segmentations = call.embeddings = None
            try:
                precompute_device_work(pipeline, [file], False, host)
            except Exception as unit_error:
                raise_if_device_fault(unit_error, f"diarization forwards of {uid}")
                out.failed[uid] = f"{type(unit_error).__name__}: {unit_error}"[:500]
    out.device_s, out.host_s = time.perf_counter() - started - host.seconds, host.seconds
    return out


@dataclasses.dataclass
class HostSeconds:
    """Seconds of host work a phase has done so far: kept as they accrue, so a phase that raises part-way still
    reports the host work it did (the caller books the rest of the phase's time as device work)."""

    seconds: float = 0.0


def precompute_device_work(pipeline: LeveredSpeakerDiarization, files: list[dict], across_units: bool,
                           host: HostSeconds) -> None:
    """The device work of several units' calls, done before the calls (levers 5 and 6): each file's call gets its
    `segmentations` (VAD's when reused, else a forward: batched across the files with `across_units`) and, when a
    speaker is active, its `embeddings` (the path `choice.embedding_path` picks, across the files with `across_units`
    when the path `batches_units`). The
    calls then run only host work, and check that what they would have computed is what they were given.
    Adds to `host` the seconds of host work it does on the way (binarizing and counting speakers, to pick the
    embeddings), each as it is done: if a later forward raises, the host seconds before it are still there."""
    calls = [call_of(f) for f in files]
    path = embedding_path(calls[0], pipeline) if calls else None  # a flight's calls share the run's levers
    inference = adapter.segmentation_inference(pipeline)
    need = []
    for file, call in zip(files, calls, strict=True):
        problem = "not offered" if call.vad_scores is None else pipeline._mismatch(call.vad_scores, file)
        need.append(problem is not None)
        if problem is not None and across_units and call.vad_scores is not None:
            call.reuse = f"fallback: {problem}"
    batched = None
    if across_units and any(need):
        needed = [file for file, needs in zip(files, need, strict=True) if needs]
        batched = iter(segment_files(inference, needed))
    for file, call, needs in zip(files, calls, need, strict=True):
        # batched, else reused or one forward (timed by the step)
        call.segmentations = next(batched) if batched is not None and needs else pipeline.get_segmentations(file)
    requests = []
    exclude = pipeline.embedding_exclude_overlap
    for file, call in zip(files, calls, strict=True):
        started = time.perf_counter()
        binarized = adapter.binarized_segmentations(pipeline, call.segmentations)
        count = pipeline.speaker_count(binarized, inference.model.receptive_field, warm_up=(0.0, 0.0))
        host.seconds += time.perf_counter() - started
        if np.nanmax(count.data) == 0.0:
            continue  # pyannote exits early: no embeddings
        if across_units and path.batches_units:
            requests.append(EmbeddingRequest(file, binarized))
        else:
            embeddings = pipeline.get_embeddings(file, binarized, exclude_overlap=exclude)
            call.embeddings = PrecomputedEmbeddings(binarized.data, exclude, embeddings, call.embedding_work)
    if requests:
        embedded = path.embed(pipeline, requests, exclude, across_units=True)
        for request, embeddings in zip(requests, embedded, strict=True):
            call = call_of(request.file)
            call.embedding_work = request.work
            call.embeddings = PrecomputedEmbeddings(request.binarized.data, exclude, embeddings, request.work)
    for call in calls:  # the caller times this phase; from here a call's device seconds are its own call's forwards
        call.device_s = 0.0
