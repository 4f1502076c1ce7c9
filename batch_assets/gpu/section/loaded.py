"""The models a GPU worker holds, and how they are loaded, with no Dagster dependency (device checks use it bare).

The diarization pipeline is loaded with the worker. The ASR models (one per language of the routing, `asr_models`)
and the language identification model are loaded on first use, at most once per process: a shard whose units are
all English loads the English model only, and no LID model when every unit's language is declared. A configured
model that does not load is a `ModelLoadError`, which fails the step (a configuration fault, not a unit's).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the model libraries load only in the GPU steps
    import torch
    from nemo.collections.asr.models import ASRModel

    from batch_assets.gpu.diarization.pipeline import LeveredSpeakerDiarization


@dataclasses.dataclass
class LoadedModels:
    device: torch.device
    diarization: LeveredSpeakerDiarization
    load_seconds: float
    segmentation_forwards: list[int]  # a counter the forward hook increments
    routing: dict[str, str] = dataclasses.field(default_factory=dict)  # language -> ASR model name
    language_id_model: str | None = None  # its name; loaded on first use
    load_asr: Callable[[str], ASRModel] | None = None
    load_language_id: Callable[[str], object] | None = None
    asr_models: dict[str, ASRModel] = dataclasses.field(default_factory=dict)  # by model name, as loaded
    asr_loads: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # loads per model name
    asr_load_seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    decoder_settings: dict[str, dict] = dataclasses.field(default_factory=dict)  # per ASR model: what this process
    # last applied to its decoder
    word_confidence: bool = True  # the words' score (the resource's setting, applied with the decoder mode)
    _language_id: object | None = None

    def model_for(self, language: str) -> str | None:
        """The ASR model that hears `language` (None: no model, the unit is `unsupported_language`)."""
        return self.routing.get(language)

    def asr_model(self, name: str) -> ASRModel:
        """The ASR model `name`, loaded on first use."""
        if name not in self.asr_models:
            started = time.perf_counter()
            self.asr_models[name] = self.load_asr(name)
            self.asr_loads[name] += 1
            self.asr_load_seconds[name] = time.perf_counter() - started
        return self.asr_models[name]

    @property
    def default_asr_name(self) -> str:
        """The routing's English model, else its first: what checks and benches of one model use."""
        return self.routing.get("en") or next(iter(self.routing.values()))

    @property
    def asr(self) -> ASRModel:
        """The default ASR model (`default_asr_name`), loaded on first use."""
        return self.asr_model(self.default_asr_name)

    @property
    def language_id_loaded(self) -> bool:
        return self._language_id is not None

    @property
    def language_id(self):
        """The language identification model, loaded on first use."""
        if self._language_id is None:
            self._language_id = self.load_language_id(self.language_id_model)
        return self._language_id


class ModelLoadError(RuntimeError):
    """A configured model could not be loaded: a configuration fault (the step fails), not a unit's."""


def load_or_explain(what: str, load, fix: str):
    """`load()`, or a `ModelLoadError` naming `what` did not load, why, and `fix`."""
    try:
        return load()
    except Exception as error:
        raise ModelLoadError(f"{what} did not load: {type(error).__name__}: {error}"[:800] + f" — {fix}") from error


def load_models(routing: dict[str, str] | str, diarization_pipeline: str, device, segmentation_batch_size: int = 32,
                embedding_batch_size: int = 32, language_id_model: str | None = None) -> LoadedModels:
    """The diarization pipeline on `device` (the levered subclass, its segmentation forwards counted); the ASR models
    of `routing` (language -> model; one model name: that model for English) and the LID model load on first use."""
    from batch_assets.gpu.adapters import pyannote_adapter
    from batch_assets.gpu.diarization.pipeline import make_levered
    from batch_assets.models.languages import TINY_LANGID
    from batch_assets.models.loaders import load_diarization_pipeline, load_language_id_model

    started = time.perf_counter()
    pipeline = make_levered(load_diarization_pipeline(diarization_pipeline, device, segmentation_batch_size,
                                                      embedding_batch_size))
    forwards = [0]
    pyannote_adapter.segmentation_inference(pipeline).model.register_forward_hook(
        lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    return LoadedModels(device, pipeline, time.perf_counter() - started, forwards,
                        routing={"en": routing} if isinstance(routing, str) else dict(routing),
                        language_id_model=language_id_model or TINY_LANGID,
                        load_asr=lambda name: load_asr(name, device),
                        load_language_id=lambda name: load_language_id_model(name, device))


def load_asr(name: str, device):
    """An ASR model as the section loads it: NeMo's NVRTC log then kept off CPython's shared `b" "`
    (`nemo_adapter`), before any decoder builds its CUDA-graph kernels."""
    from batch_assets.gpu.adapters.nemo_adapter import install_nvrtc_fix
    from batch_assets.models.loaders import load_asr_model

    model = load_asr_model(name, device)
    install_nvrtc_fix()
    return model
