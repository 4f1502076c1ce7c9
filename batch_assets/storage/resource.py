"""Where audio comes from and where tables go: two fsspec URLs (s3:// through s3fs, or a local path).

Assets never pass audio or tables through an IO manager: each asset writes its outputs under
`{storage_url}/{asset}/{partition}/` and downstream assets read them from there, so large arrays are
never pickled and an analyst can open any output with polars directly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import posixpath
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import dagster as dg
import fsspec
import numpy as np
import polars as pl
from pydantic import Field

from batch_assets.schema import published
from batch_assets.storage.arrays import npy_bytes
from batch_assets.storage.partition_outputs import PartitionOutputs
from batch_assets.storage.paths import fsync_folder, is_local, remove_path

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_SOURCE_URL = str(REPO_ROOT / "sample_data" / "audio")  # the embedded default; deployments set the env
DEFAULT_STORAGE_URL = str(REPO_ROOT / "storage")
SAMPLE_PARTITION = "2026-01-15"  # the day of the bundled sample (DEFAULT_SOURCE_URL)


def _join(root: str, *parts: str) -> str:
    return posixpath.join(root.rstrip("/"), *parts)


class StorageConfigError(Exception):
    """The storage settings cannot work (a missing source root, an output root that refuses writes).

    Permanent: retrying cannot fix it, so callers fail at once, before loading models or fetching audio.
    """


class StorageResource(dg.ConfigurableResource):
    """Source audio and output tables, as fsspec URLs.

    S3 credentials come from the usual AWS variables (or an instance role) unless given here; they are
    never logged. `s3_endpoint_url` points s3fs at any S3 API (MinIO, moto, a regional endpoint).
    """

    source_url: str = Field(default=DEFAULT_SOURCE_URL, description="Root of the audio: {source_url}/YYYY-MM-DD/...")
    storage_url: str = Field(default=DEFAULT_STORAGE_URL, description="Root of every output table and array")
    s3_endpoint_url: str | None = Field(default=None,
                                        description="Any S3 API (MinIO, moto, a regional endpoint); empty: AWS")
    s3_region: str | None = Field(default=None, description="Empty: the AWS chain's region")
    s3_access_key_id: str | None = Field(default=None, description="Leave empty to use the AWS credential chain")
    s3_secret_access_key: str | None = Field(default=None, description="Leave empty to use the AWS credential chain")
    s3_max_attempts: int = Field(default=4, description="botocore's own attempts per request (standard retry mode)")
    simulated_latency_per_unit_s: float = Field(
        default=0.0, description="Benchmarks only: sleep this long per source object the GPU step fetches to decode "
        "(object-storage latency; units fetched concurrently pay it concurrently)"
    )

    def _storage_options(self, url: str) -> dict[str, Any]:
        if not url.startswith(("s3://", "s3a://")):
            return {}
        options: dict[str, Any] = {}
        client_kwargs: dict[str, Any] = {}
        if self.s3_endpoint_url:
            client_kwargs["endpoint_url"] = self.s3_endpoint_url
        if self.s3_region:
            client_kwargs["region_name"] = self.s3_region
        if client_kwargs:
            options["client_kwargs"] = client_kwargs
        options["config_kwargs"] = {"retries": {"max_attempts": self.s3_max_attempts, "mode": "standard"}}
        if self.s3_access_key_id and self.s3_secret_access_key:
            options["key"] = self.s3_access_key_id
            options["secret"] = self.s3_secret_access_key
        return options

    def filesystem(self, url: str) -> tuple[fsspec.AbstractFileSystem, str]:
        """The filesystem for a URL and the URL's path inside it.

        A path is only a path: not fsspec's URL chain (`url_to_fs` reads `a::b` as two filesystems, so a
        key like `call::1.wav` would open a file named `call`), and never a glob (see `remove_path`).
        """
        scheme, _ = fsspec.core.split_protocol(url)
        fs = fsspec.filesystem(scheme or "file", **self._storage_options(url))
        return fs, fs._strip_protocol(url)

    # -- source audio ---------------------------------------------------------------------------
    def source_partition_url(self, partition: str) -> str:
        return _join(self.source_url, partition)

    def check_source_root(self) -> None:
        """The source root must exist (a folder, or an S3 prefix holding objects): a typo is a configuration error."""
        try:
            fs, path = self.filesystem(self.source_url)
            exists = fs.isdir(path) if is_local(fs) else fs.exists(path)
        except (PermissionError, FileNotFoundError, OSError) as error:
            raise StorageConfigError(f"the audio source {self.source_url} cannot be read "
                                     f"({type(error).__name__}: {error}): fix BATCH_ASSETS_SOURCE_URL (or the storage "
                                     "resource's source_url) or its permissions") from None
        if not exists:
            raise StorageConfigError(
                f"the audio source {self.source_url} does not exist: fix BATCH_ASSETS_SOURCE_URL (or the storage "
                "resource's source_url); partitions are read from {source_url}/YYYY-MM-DD/. Nothing was written."
            )

    # -- outputs ---------------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Write and delete a small object under the output root; a refusal is permanent and named at once."""
        url = _join(self.storage_url, ".write-check", f"{uuid.uuid4().hex}.txt")
        try:
            fs, path = self.filesystem(url)
            if is_local(fs):  # on S3, makedirs would create a mistyped bucket instead of reporting it
                fs.makedirs(posixpath.dirname(path), exist_ok=True)
            with fs.open(path, "wb") as handle:
                handle.write(b"batch_assets write check\n")
            remove_path(fs, path)
            if is_local(fs):
                with contextlib.suppress(OSError):
                    os.rmdir(posixpath.dirname(path))
        except (PermissionError, FileNotFoundError, OSError) as error:
            raise StorageConfigError(
                f"the output storage {self.storage_url} is not writable ({type(error).__name__}: {str(error)[:200]}): "
                "fix BATCH_ASSETS_STORAGE_URL (or the storage resource's storage_url) or grant write access. "
                "Nothing was fetched and no model was loaded."
            ) from None

    def url(self, *parts: str) -> str:
        """A URL under the output root."""
        return _join(self.storage_url, *parts)

    def output_url(self, asset: str, partition: str, *name: str) -> str:
        return self.url(asset, partition, *name)

    def write_parquet(self, frame: pl.DataFrame, asset: str, partition: str, name: str) -> str:
        url = self.output_url(asset, partition, f"{name}.parquet")
        buffer = io.BytesIO()
        frame.write_parquet(buffer)
        self.write_bytes(url, buffer.getvalue())
        return url

    def write_published(self, frame: pl.DataFrame, asset: str, partition: str, name: str) -> str:
        """An asset's table as analysts read it (`schema/published.py`: a `day` column, ms times, described columns)."""
        url = self.output_url(asset, partition, f"{name}.parquet")
        self.write_bytes(url, published.parquet_bytes(published.published(frame, partition)))
        return url

    def read_parquet(self, asset: str, partition: str, name: str) -> pl.DataFrame:
        """A table as the pipeline uses it (a published table without its `day` column), read whole in one request
        (`read_bytes`): a long-lived process (the late-audio sensor's) never reads it through a listing it cached
        before a run replaced it."""
        url = self.output_url(asset, partition, f"{name}.parquet")
        try:
            data = self.read_bytes(url)
        except (FileNotFoundError, NotADirectoryError):  # not there (locally, maybe a file where a folder goes)
            raise FileNotFoundError(
                f"{url} does not exist: materialize {asset!r} for partition {partition!r} first"
            ) from None
        return published.without_day(pl.read_parquet(io.BytesIO(data)))

    def write_array(self, array: np.ndarray, asset: str, partition: str, name: str) -> str:
        url = self.output_url(asset, partition, f"{name}.npy")
        self.write_bytes(url, npy_bytes(array, url))
        return url

    def read_array(self, url: str) -> np.ndarray:
        return np.load(io.BytesIO(self.read_bytes(url)), allow_pickle=False)

    def size(self, url: str) -> int:
        """A file's size as the store has it now, never from a listing this process cached (FileNotFoundError when
        it does not exist). s3fs keeps a listing's sizes per filesystem instance, and fsspec keeps an instance per
        thread: a write from another thread, or from an earlier step of an in-process run, leaves an older size
        there (a commit then looked cut off)."""
        fs, path = self.filesystem(url)
        return fs.info(path, refresh=True)["size"]

    def read_json_files(self, url: str) -> list[dict]:
        """Every `.json` file under `url` (none: empty), listed afresh (no listing cached by an earlier call), a file
        removed between the listing and its read left out."""
        fs, base = self.filesystem(url)
        fs.invalidate_cache(base)
        found = []
        for path in (fs.find(base) if fs.exists(base) else []):
            if path.endswith(".json"):
                with contextlib.suppress(FileNotFoundError):
                    found.append(json.loads(fs.cat_file(path)))
        return found

    def read_bytes(self, url: str) -> bytes:
        """A whole file's bytes (FileNotFoundError when it does not exist), in one request on an object store: one
        version of the object, even while another writer replaces it (s3fs's `open` sends a HEAD, then ranged GETs
        that fail with FileExpired once the object changed)."""
        fs, path = self.filesystem(url)
        return fs.cat_file(path)

    def write_bytes(self, url: str, data: bytes) -> None:
        """Replace the file whole, so readers never see half of it.

        Locally: a temporary file beside it, flushed to disk, then renamed over it (`os.replace`, atomic), and the
        folder fsynced.
        On an object store: one upload (a PUT; a multipart upload above s3fs's 100 MiB threshold), which replaces
        the object atomically when it completes. No copy or move through fsspec:
        its copy expands `[`, `]`, `*` and `?` in the source path as a glob (a step key such as
        `gpu_section.gpu_shard[20260201_s000]` then matches nothing), and a temporary object could be left behind.
        """
        fs, path = self.filesystem(url)
        if not is_local(fs):
            fs.pipe_file(path, data)
            return
        self.write_chunks(url, [data])

    def write_chunks(self, url: str, chunks: Iterable[bytes]) -> None:
        """`write_bytes` for a file too big to hold: its bytes in pieces. Locally they go to the temporary file as
        they come; for an object store to a local temporary file first, then one upload (multipart above s3fs's
        threshold) that replaces the object when it completes, so a failure while the pieces are made leaves the
        object as it was."""
        fs, path = self.filesystem(url)
        if not is_local(fs):
            with tempfile.NamedTemporaryFile(prefix="batch-assets-upload-") as staged:
                for chunk in chunks:
                    staged.write(chunk)
                staged.flush()
                fs.put_file(staged.name, path)
            return
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            with open(tmp, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
            fsync_folder(posixpath.dirname(path))  # the rename itself on disk: a crash cannot bring back the old file
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def remove_tree(self, url: str) -> int:
        """Remove every file under `url` (a folder or prefix), no glob; returns how many were removed."""
        fs, root = self.filesystem(url)
        if is_local(fs):
            if not os.path.isdir(root):
                return 0
            count = sum(len(files) for _, _, files in os.walk(root))
            shutil.rmtree(root)
            return count
        paths = fs.find(root)
        for path in paths:
            remove_path(fs, path)
        return len(paths)

    @contextlib.contextmanager
    def replace_partition(self, asset: str, partition: str, remove_stale: bool = True,
                          fence: Callable[[], None] = lambda: None) -> Iterator[PartitionOutputs]:
        """One materialization's outputs for (asset, partition), replacing the previous ones.

        Tables are written whole (`write_bytes`: a temporary file renamed into place locally; one upload on S3,
        so the object appears whole), so a reader sees the old table or the
        new one, never half of one and never an empty folder. Arrays go to a folder of their own per
        materialization (`outputs.version`), so the previous tables keep pointing at the previous
        arrays until they are replaced. Once everything is written, whatever the previous
        materialization left that this one did not write is removed (no stale rows, no orphan arrays); if
        the block fails (a guard refusing, say), nothing of the previous materialization is removed, and the
        arrays this one wrote into its own folder are. `remove_stale=False` keeps the other files (a rerun of some
        units adds only theirs). `fence` (the partition lease's `check`) runs before every write and removal: a
        run that lost the partition's lease writes nothing more.
        """
        outputs = PartitionOutputs(self, asset, partition, fence)
        try:
            yield outputs
        except BaseException:
            outputs.remove_own_arrays()  # a refused or failed materialization leaves what was there, nothing more
            raise
        if remove_stale:
            outputs.remove_stale()


