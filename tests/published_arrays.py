"""Every `.npy` a run published loads (issue 46: with NeMo's CUDA-graph decoder, arrays once went out unreadable).

End-to-end runs in the suite call `assert_arrays_load` on their storage after a successful run: in process
(`conftest.materialize_partition`) and as a deployment's process (`deployments.Deployment.run`), local and S3.
"""

from __future__ import annotations

import io

import numpy as np


def assert_arrays_load(storage) -> int:
    """Load every `.npy` under the storage's output root; returns how many."""
    fs, root = storage.filesystem(storage.storage_url)
    paths = [p for p in fs.find(root) if p.endswith(".npy")] if fs.exists(root) else []
    for path in paths:
        try:
            np.load(io.BytesIO(fs.cat_file(path)), allow_pickle=False)
        except Exception as error:
            raise AssertionError(f"published array {path} does not load: {type(error).__name__}: {error}") from None
    return len(paths)
