"""`batch-assets models fetch`: load the configured models once, filling the caches the step pods read.

What the Kubernetes model-cache Job runs (`k8s/model-cache.yaml`): the pods then run with `HF_HUB_OFFLINE=1`.
"""

from __future__ import annotations

import pathlib


def _folder_bytes(path) -> int:
    files = pathlib.Path(path).expanduser().rglob("*")
    return sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())


def fetch_models() -> int:
    """Load the configured models once (every ASR model of the routing, BATCH_ASSETS_ASR_MODELS with
    BATCH_ASSETS_ASR_MODEL; BATCH_ASSETS_LANGUAGE_ID_MODEL; BATCH_ASSETS_DIARIZATION_PIPELINE; on the CPU), which
    fills the caches the step pods read: the Hugging Face hub cache (HF_HOME: the parakeet .nemo files,
    community-1's), NeMo's cache (NEMO_CACHE_DIR: langid_ambernet, from NGC) and the builtin models' cache
    (BATCH_ASSETS_MODEL_CACHE); prints each cache and its size."""
    import torch
    from huggingface_hub import constants
    from nemo.utils.data_utils import resolve_cache_dir

    from batch_assets.gpu.section.loaded import load_models
    from batch_assets.models.builtin import cache_root
    from batch_assets.settings import current_routing, current_settings

    settings = current_settings()
    loaded = load_models(current_routing(), settings.diarization_pipeline, torch.device("cpu"),
                         language_id_model=settings.language_id_model)
    print(f"batch-assets: loaded {settings.diarization_pipeline} in {loaded.load_seconds:.1f} s")
    for name in dict.fromkeys(current_routing().values()):  # each model once, however many languages it hears
        loaded.asr_model(name)
        loaded.asr_models.pop(name)  # one at a time: three 0.6 B models need not share the Job's memory
        print(f"batch-assets: loaded {name} in {loaded.asr_load_seconds[name]:.1f} s")
    loaded.language_id  # noqa: B018
    print(f"batch-assets: loaded {settings.language_id_model}")
    for name, path in (("HF_HOME hub cache", constants.HF_HUB_CACHE), ("NEMO_CACHE_DIR", resolve_cache_dir()),
                       ("BATCH_ASSETS_MODEL_CACHE", cache_root())):
        print(f"batch-assets: {name}: {path}: {_folder_bytes(path) / 2**20:.1f} MiB")
    return 0
