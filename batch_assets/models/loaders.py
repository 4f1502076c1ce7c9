"""Load the ASR model and the diarization pipeline from a pretrained name, a local path, or a builtin.

- ASR: a `.nemo` file (`ASRModel.restore_from`), or a NeMo/Hugging Face name such as
  `nvidia/parakeet-tdt-0.6b-v2` (`ASRModel.from_pretrained`).
- Diarization: a pyannote pipeline folder or `config.yaml`, or a name such as
  `pyannote/speaker-diarization-community-1` (`Pipeline.from_pretrained`, token from `HF_TOKEN`).
- Language identification: a `.nemo` file or a NeMo name such as `langid_ambernet`
  (`EncDecSpeakerLabelModel.restore_from` / `.from_pretrained`); its labels (`cfg.train_ds.labels`) are language codes.
- `builtin:tiny-tdt` (`-es`, `-de`, `-ja`) / `builtin:tiny-diarization` / `builtin:tiny-langid`: the offline
  defaults (see `builtin.py`).
- `builtin:parakeet-tdt-0.6b-v2-shaped` (`-v3-shaped`, `builtin:parakeet-tdt_ctc-0.6b-ja-shaped`) /
  `builtin:community-1-shaped`: the production architectures at production sizes with seeded random weights, for
  benches and tests (see `production_shaped.py`).
"""

from __future__ import annotations

import pathlib

from batch_assets.models import builtin, production_shaped
from batch_assets.models.environment import quiet_model_libraries
from batch_assets.models.names import is_builtin
from batch_assets.settings import current_settings


def _local_or_name(name: str) -> str | pathlib.Path:
    if name == production_shaped.COMMUNITY1_SHAPED:
        return production_shaped.community1_shaped_path()
    if is_builtin(name):
        return builtin.resolve(name)
    path = pathlib.Path(name).expanduser()
    return path if path.exists() else name


def load_asr_model(name: str, device):
    quiet_model_libraries()
    from nemo.collections.asr.models import ASRModel

    if name in production_shaped.SHAPED_ASR:  # built in memory: no file to restore
        model = production_shaped.build_asr_shaped(name)
    elif isinstance(source := _local_or_name(name), pathlib.Path):
        model = ASRModel.restore_from(str(source), map_location=device)
    else:
        model = ASRModel.from_pretrained(source, map_location=device)
    model = model.to(device).eval()
    model.freeze()
    return model


def load_diarization_pipeline(name: str, device, segmentation_batch_size: int, embedding_batch_size: int):
    quiet_model_libraries()
    from pyannote.audio import Pipeline

    source = _local_or_name(name)
    token = current_settings().hf_token if not isinstance(source, pathlib.Path) else None
    pipeline = Pipeline.from_pretrained(source, token=token)
    if pipeline is None:
        raise RuntimeError(f"could not load diarization pipeline {name!r} (gated model without HF_TOKEN?)")
    pipeline.segmentation_batch_size = segmentation_batch_size
    pipeline.embedding_batch_size = embedding_batch_size
    return pipeline.to(device)


def load_language_id_model(name: str, device):
    """A language identification model (`EncDecSpeakerLabelModel`, AmberNet's class) on `device`, frozen; refused
    when it carries no labels (`cfg.train_ds.labels`: the language of each of its classes)."""
    quiet_model_libraries()
    from nemo.collections.asr.models import EncDecSpeakerLabelModel

    if isinstance(source := _local_or_name(name), pathlib.Path):
        model = EncDecSpeakerLabelModel.restore_from(str(source), map_location=device)
    else:
        model = EncDecSpeakerLabelModel.from_pretrained(source, map_location=device)
    labels = model.cfg.get("train_ds", {}).get("labels")
    if not labels or len(labels) != model.decoder._num_classes:
        raise ValueError(f"language identification model {name!r} has no language labels for its "
                         f"{model.decoder._num_classes} classes (cfg.train_ds.labels): set "
                         "BATCH_ASSETS_LANGUAGE_ID_MODEL to a model trained with them (langid_ambernet)")
    model = model.to(device).eval()
    model.freeze()
    return model
