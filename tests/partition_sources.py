"""Small multi-partition sources built from the sample partition's files (for backfill and webserver tests)."""

from __future__ import annotations

import pathlib
import shutil

from batch_assets.storage.resource import REPO_ROOT, SAMPLE_PARTITION

SAMPLE = REPO_ROOT / "sample_data" / "audio" / SAMPLE_PARTITION


def make_source(root: pathlib.Path, layout: dict[str, list[str]]) -> pathlib.Path:
    """`layout`: partition -> relative keys of sample files to copy into it."""
    for partition, keys in layout.items():
        for key in keys:
            target = root / partition / key
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(SAMPLE / key, target)
    return root
