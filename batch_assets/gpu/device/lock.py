"""A lock around the GPU section that holds across processes sharing a device.

Dagster runs each step in its own process (its own pod on Kubernetes), and two GPU steps may share a
device (one inside the section while the other prepares or writes), so an in-process lock is not
enough: this is a file lock keyed by the device, in a folder all those processes see
(`BATCH_ASSETS_LOCK_DIR`; on Kubernetes an emptyDir shared by the pod's containers or a hostPath).
"""

from __future__ import annotations

import contextlib
import pathlib
import re
import tempfile
import time
from collections.abc import Iterator

import filelock

DEFAULT_LOCK_DIR = str(pathlib.Path(tempfile.gettempdir()) / "batch_assets-locks")  # machine-wide
# (BATCH_ASSETS_LOCK_DIR)


def lock_path(lock_dir: str, device: str) -> pathlib.Path:
    return pathlib.Path(lock_dir) / f"gpu-section-{re.sub(r'[^A-Za-z0-9_-]', '_', device)}.lock"


@contextlib.contextmanager
def device_section(lock_dir: str, device: str) -> Iterator[float]:
    """Hold the device's section lock; yields the seconds spent waiting for it."""
    path = lock_path(lock_dir, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with filelock.FileLock(str(path)):
        yield time.perf_counter() - started
