"""The GPU resource: models loaded once per process, the device, and the cross-process section lock.

Models are cached per process (keyed by what defines them), so several partitions processed in one run
(a backfill with a BackfillPolicy) load them once. A decoder-mode mismatch or a device fault (a CUDA
error, device out-of-memory, NCCL: `gpu/device/faults.py`) quarantines the process: every later request for the
section is refused, because a worker whose decoder changed behind its back, or whose device failed, can
no longer be trusted to produce results identical to the baseline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import dagster as dg
from pydantic import Field, PrivateAttr

from batch_assets.gpu.device.lock import DEFAULT_LOCK_DIR, device_section
from batch_assets.gpu.outputs.commit_identity import CommitIdentity, commit_identity
from batch_assets.gpu.section.loaded import LoadedModels
from batch_assets.models.languages import DEFAULT_ROUTING, PRESETS, TINY_LANGID, with_english
from batch_assets.models.names import TINY_DIARIZATION

_LOADED: dict[tuple, LoadedModels] = {}
_QUARANTINE: list[str] = []
_LOADS = [0]


def model_loads() -> int:
    """How many times this process has loaded models (a backfill run that loads once per run shows 1)."""
    return _LOADS[0]


def quarantine(reason: str) -> None:
    _QUARANTINE.append(reason)


def quarantine_reason() -> str | None:
    return _QUARANTINE[0] if _QUARANTINE else None


class GpuResource(dg.ConfigurableResource):
    """Models and device for the GPU section."""

    asr_models: dict[str, str] = Field(
        default_factory=lambda: dict(PRESETS[DEFAULT_ROUTING]),
        description="Language (ISO 639-1) -> NeMo ASR model: a name (nvidia/parakeet-tdt-0.6b-v3), a .nemo path, or a "
                    "builtin; a unit whose language is not here is published unsupported_language",
    )
    asr_model: str | None = Field(default=None, description="The `en` model, replacing the routing's (none: keep it)")
    language_id_model: str = Field(default=TINY_LANGID, description="Language identification: langid_ambernet, a "
                                   ".nemo path, or builtin:tiny-langid")
    diarization_pipeline: str = Field(
        default=TINY_DIARIZATION,
        description="pyannote pipeline: a name (pyannote/speaker-diarization-community-1), a folder, or "
                    "builtin:tiny-diarization",
    )
    device: str = Field(default="auto", description="'auto', 'cpu', 'cuda' or 'cuda:N'")
    segmentation_batch_size: int = Field(default=32,
                                         description="Shared by VAD and diarization so scores are identical")
    embedding_batch_size: int = Field(default=32)
    asr_batch_size: int = Field(default=0, ge=0, description="ASR segments per forward, longest first; 0: by device "
                                "(gpu/asr/transcribe.py: batch_size_for: 128 on CUDA, 8 on CPU)")
    lock_dir: str = Field(default=DEFAULT_LOCK_DIR, description="Folder of the per-device section locks")
    torch_threads: int = Field(default=0, description="0 = torch default")
    word_confidence: bool = Field(default=True, description="The TDT decoder's word confidence as the words' score "
                                  "(2-3 % of ASR seconds on CPU); false: score is null")

    _models: LoadedModels | None = PrivateAttr(default=None)

    def load(self, log=None) -> LoadedModels:
        """The models, loaded on first use (not at resource set-up: a step that finds no audio, or storage that
        refuses writes, fails or finishes without paying for a model load)."""
        if self._models is None:
            self._models = self._load(log)
        self._models.word_confidence = self.word_confidence
        return self._models

    def routing(self) -> dict[str, str]:
        """Language -> ASR model: `asr_models`, its `en` entry replaced by `asr_model` when that is set."""
        return with_english(self.asr_models, self.asr_model)

    def commit_identity(self, switches: Mapping[str, bool], gpu_step: bool = False) -> CommitIdentity:
        """What a flight committed under these models and `switches` (the step's run config) records, and what a
        resume compares (`gpu/outputs/commit_identity.py`); reads the models' local files, loads nothing. A GPU
        step (`gpu_step`) adds the device type it runs on; a CPU step leaves it to the GPU steps."""
        return commit_identity(self.routing(), self.language_id_model, self.diarization_pipeline, switches,
                               self.word_confidence, self.segmentation_batch_size,
                               self._resolve_device().type if gpu_step else None, self.embedding_batch_size,
                               self.asr_batch_size)

    def _resolve_device(self):
        import torch

        if self.torch_threads > 0:
            torch.set_num_threads(self.torch_threads)
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def _load(self, log) -> LoadedModels:
        device = self._resolve_device()
        key = (tuple(sorted(self.routing().items())), self.language_id_model, self.diarization_pipeline, str(device),
               self.segmentation_batch_size, self.embedding_batch_size)
        if key in _LOADED:
            return _LOADED[key]
        from batch_assets.gpu.section.loaded import load_models

        loaded = load_models(self.routing(), self.diarization_pipeline, device, self.segmentation_batch_size,
                             self.embedding_batch_size, self.language_id_model)
        if log:
            log.info(f"loaded {self.diarization_pipeline} on {device} in {loaded.load_seconds:.1f} s (ASR models and "
                     "language identification load when a flight first needs them)")
        _LOADED[key] = loaded
        _LOADS[0] += 1
        return loaded

    @property
    def models(self) -> LoadedModels:
        return self.load()

    @contextlib.contextmanager
    def section(self) -> Iterator[float]:
        """The resource-locked GPU section; yields seconds waited for the lock."""
        reason = quarantine_reason()
        if reason:
            raise dg.Failure(
                description=f"this worker is quarantined and refuses GPU work: {reason}",
                metadata={"quarantine": reason},
                allow_retries=False,
            )
        with device_section(self.lock_dir, str(self.load().device)) as waited:
            yield waited
