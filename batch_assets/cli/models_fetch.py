"""`batch-assets models fetch`: load the configured models once, filling the caches the step pods read.

What the Kubernetes model-cache Job runs (`k8s/model-cache.yaml`): the pods then run with `HF_HUB_OFFLINE=1`.
"""

from __future__ import annotations

import pathlib


def _folder_bytes(path) -> int:
    return sum(p.stat().st_size for p in pathlib.Path(path).rglob("*") if p.is_file() and not p.is_symlink())


def fetch_models() -> int:
    """Load the configured models once (BATCH_ASSETS_ASR_MODEL, BATCH_ASSETS_DIARIZATION_PIPELINE; CPU), which fills
    the caches the step pods read: the Hugging Face hub cache (HF_HOME: parakeet's .nemo, community-1's files) and
    the builtin models' cache (BATCH_ASSETS_MODEL_CACHE); prints each cache and its size."""
    import torch
    from huggingface_hub import constants

    from batch_assets.gpu.loaded import load_models
    from batch_assets.models.builtin import cache_root
    from batch_assets.settings import current_settings

    asr, pipeline = current_settings().asr_model, current_settings().diarization_pipeline
    loaded = load_models(asr, pipeline, torch.device("cpu"))
    print(f"batch-assets: loaded {asr} and {pipeline} in {loaded.load_seconds:.1f} s")
    for name, path in (("HF_HOME hub cache", constants.HF_HUB_CACHE), ("BATCH_ASSETS_MODEL_CACHE", cache_root())):
        print(f"batch-assets: {name}: {path}: {_folder_bytes(path) / 2**20:.1f} MiB")
    return 0
