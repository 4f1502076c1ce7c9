"""The files one materialization writes under `{storage_url}/{asset}/{partition}/`
(`StorageResource.replace_partition`).

Tables are written whole; arrays go to a version folder of this materialization's own; once the block
succeeds, whatever the previous materialization left that this one did not write is removed, and if it fails,
only this one's own arrays are. `fence` (the partition lease's `check`) runs before every write and removal.
"""

from __future__ import annotations

import contextlib
import posixpath
import time
import uuid
from collections.abc import Callable
from typing import Protocol

import fsspec
import numpy as np
import polars as pl

from batch_assets.storage.paths import is_local, remove_empty_folders, remove_path


class OutputStorage(Protocol):
    """What a materialization's outputs need of the storage (`storage/resource.py: StorageResource` has it); a
    protocol, so that the resource, which makes these objects, and this module do not import each other."""

    def filesystem(self, url: str) -> tuple[fsspec.AbstractFileSystem, str]: ...

    def output_url(self, asset: str, partition: str, *name: str) -> str: ...

    def write_published(self, frame: pl.DataFrame, asset: str, partition: str, name: str) -> str: ...

    def write_array(self, array: np.ndarray, asset: str, partition: str, name: str) -> str: ...

    def write_bytes(self, url: str, data: bytes) -> None: ...


class PartitionOutputs:
    """The files one materialization writes under `{storage_url}/{asset}/{partition}/`."""

    def __init__(self, storage: OutputStorage, asset: str, partition: str, fence: Callable[[], None] = lambda: None):
        self.storage, self.asset, self.partition, self.fence = storage, asset, partition, fence
        self.written: set[str] = set()
        # names this materialization's array folder: sortable by time, unique across writers
        self.version = time.strftime("v%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]

    def write_parquet(self, frame: pl.DataFrame, name: str) -> str:
        self.fence()
        return self._track(self.storage.write_published(frame, self.asset, self.partition, name))

    def write_array(self, array: np.ndarray, name: str) -> str:
        self.fence()
        return self._track(self.storage.write_array(array, self.asset, self.partition, name))

    def write_file(self, data: bytes, name: str) -> str:
        """Any other file of the materialization (an export), written whole like a table."""
        self.fence()
        url = self.storage.output_url(self.asset, self.partition, name)
        self.storage.write_bytes(url, data)
        return self._track(url)

    def keep(self, paths: list[str]) -> None:
        """Count files another step wrote (filesystem paths) as this materialization's, so they are not removed."""
        self.written.update(paths)

    def _track(self, url: str) -> str:
        self.written.add(self.storage.filesystem(url)[1])
        return url

    def remove_own_arrays(self) -> None:
        """Remove the files this materialization wrote into its own version folder (nothing else had them)."""
        fs, root = self.storage.filesystem(self.storage.output_url(self.asset, self.partition))
        for path in sorted(p for p in self.written if f"/{self.version}/" in p):
            with contextlib.suppress(FileNotFoundError):
                remove_path(fs, path)
        if is_local(fs):
            remove_empty_folders(root)

    def remove_stale(self) -> list[str]:
        self.fence()
        fs, root = self.storage.filesystem(self.storage.output_url(self.asset, self.partition))
        if not fs.exists(root):
            return []
        stale = [path for path in fs.find(root) if path not in self.written and ".tmp-" not in posixpath.basename(path)]
        for path in stale:
            remove_path(fs, path)
        if is_local(fs):  # object stores have no folders; a local one keeps empty version folders unless removed
            remove_empty_folders(root)
        return stale
