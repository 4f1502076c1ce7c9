"""The models a GPU worker holds, and how they are loaded, with no Dagster dependency (device checks use it bare)."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the model libraries load only in the GPU steps
    import torch
    from nemo.collections.asr.models import ASRModel

    from batch_assets.gpu.diarization import LeveredSpeakerDiarization


@dataclasses.dataclass
class LoadedModels:
    device: torch.device
    asr: ASRModel  # an EncDecRNNTBPEModel (TDT) for every model this project loads
    diarization: LeveredSpeakerDiarization
    load_seconds: float
    segmentation_forwards: list[int]  # a counter the forward hook increments
    decoder_settings: dict | None = None  # what this process last applied to the ASR decoder
    word_confidence: bool = True  # the words' score (the resource's setting, applied with the decoder mode)


def load_models(asr_model: str, diarization_pipeline: str, device, segmentation_batch_size: int = 32,
                embedding_batch_size: int = 32) -> LoadedModels:
    """Load both models on `device`; the pipeline becomes the levered subclass, its segmentation forwards counted."""
    from batch_assets.gpu import pyannote_adapter
    from batch_assets.gpu.diarization import make_levered
    from batch_assets.models.loaders import load_asr_model, load_diarization_pipeline

    started = time.perf_counter()
    asr = load_asr_model(asr_model, device)
    pipeline = make_levered(load_diarization_pipeline(diarization_pipeline, device, segmentation_batch_size,
                                                      embedding_batch_size))
    forwards = [0]
    pyannote_adapter.segmentation_inference(pipeline).model.register_forward_hook(
        lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    return LoadedModels(device, asr, pipeline, time.perf_counter() - started, forwards)
