"""A source object as listed (its size and storage version), its head read in ranges, its body read once.

Why: listing (`manifest.py`) reads only what it needs to plan (size, version, and the header through
`audio/header_probe.py`); the GPU step reads each object once, to decode it (`stream.py`), and must know it read the
object that was listed. The version is what the storage says identifies the bytes: on S3 the ETag (and the
VersionId where the bucket keeps versions), locally the modification time in nanoseconds. The read checks the size
and version before it reads, the size after, and, where the ETag is the MD5 of the bytes (a single-part upload),
the MD5 of what it read: an object that changed since it was listed is `ChangedSinceListed`, whichever way it
changed.

A local object is opened beneath its partition folder without following any symlink (`fetch.open_confined`). No
Dagster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from typing import BinaryIO

from batch_assets.ingest.fetch import (
    CHUNK,
    DEFAULT_RETRIES,
    ChangedSinceListed,
    RetryPolicy,
    open_confined,
    with_retries,
)
from batch_assets.ingest.units import relative_key
from batch_assets.storage.paths import is_local

_MD5 = re.compile(r"^[0-9a-f]{32}$")


@dataclasses.dataclass(frozen=True)
class ObjectVersion:
    """What identifies an object's bytes without reading them: its size and the storage's version string."""

    size: int
    version: str  # 'etag "…"' (+ ' version_id …') on an object store, 'mtime_ns …' locally

    @property
    def etag_md5(self) -> str | None:
        """The ETag when it is the MD5 of the bytes (a single-part upload), else None."""
        match = re.search(r'etag "?([0-9a-fA-F-]+)"?', self.version)
        etag = match.group(1).lower() if match else ""
        return etag if _MD5.match(etag) else None


@dataclasses.dataclass(frozen=True)
class ReadObject:
    """An object read whole: its size, sha256, and the version it had when read."""

    size: int
    sha256: str
    version: ObjectVersion


def _local(fs, confine_to: str | None) -> bool:
    return confine_to is not None and is_local(fs)


def store_version(info: dict) -> ObjectVersion:
    etag = info.get("ETag") or info.get("etag")
    version_id = info.get("VersionId") or info.get("version_id")
    parts = [f"etag {etag}" if etag else "", f"version_id {version_id}" if version_id else ""]
    return ObjectVersion(int(info["size"]), " ".join(p for p in parts if p) or "unversioned")


def _fd_version(handle: BinaryIO) -> ObjectVersion:
    st = os.fstat(handle.fileno())
    return ObjectVersion(st.st_size, f"mtime_ns {st.st_mtime_ns}")


@contextlib.contextmanager
def _whole(fs, path: str, confine_to: str | None) -> Iterator[tuple[ObjectVersion, BinaryIO]]:
    """(the object's version now, a handle on its bytes); locally one confined descriptor, its version from it."""
    if _local(fs, confine_to):
        with open_confined(confine_to, relative_key(confine_to, path)) as handle:
            yield _fd_version(handle), handle
        return
    fs.invalidate_cache(path)  # the store's version now, not the listing cached in this process
    version = store_version(fs.info(path))
    with fs.open(path, "rb", block_size=CHUNK) as handle:
        yield version, handle


@contextlib.contextmanager
def opened(fs, path: str, confine_to: str | None) -> Iterator[tuple[ObjectVersion, Callable[[int, int], bytes]]]:
    """(the object's version as listed, a ranged reader `read(start, end)`); locally one confined descriptor read
    with `pread`, on a store ranged GETs (the version from the listing cached in this process)."""
    if _local(fs, confine_to):
        with _whole(fs, path, confine_to) as (version, handle):
            fd = handle.fileno()
            yield version, lambda start, end: os.pread(fd, end - start, start)
        return
    yield store_version(fs.info(path)), lambda start, end: fs.cat_file(path, start=start, end=end)


def read_once(fs, path: str, listed: ObjectVersion | None, dest: BinaryIO, confine_to: str | None,
              retries: RetryPolicy = DEFAULT_RETRIES) -> ReadObject:
    """Stream the object into `dest` (chunks: memory stays flat), hashing as it streams; `ChangedSinceListed` when
    it is not the object `listed` (size or version before the read, size after, MD5 against an MD5 ETag). `listed`
    None: whatever the object holds now (a sidecar). Retried (`retries`) on storage errors."""

    def copy() -> ReadObject:
        dest.seek(0)
        dest.truncate()
        sha256, md5, size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
        with _whole(fs, path, confine_to) as (now, handle):
            if listed is not None and (now.size, now.version) != (listed.size, listed.version):
                raise ChangedSinceListed(f"changed since listed: now {now.size} bytes, {now.version}; listed "
                                         f"{listed.size} bytes, {listed.version}")
            while chunk := handle.read(CHUNK):
                sha256.update(chunk)
                md5.update(chunk)
                dest.write(chunk)
                size += len(chunk)
        dest.flush()
        if listed is not None and size != listed.size:
            raise ChangedSinceListed(f"changed while read: {size} bytes read, {listed.size} listed")
        if listed is not None and listed.etag_md5 and md5.hexdigest() != listed.etag_md5:
            raise ChangedSinceListed(f"changed while read: MD5 {md5.hexdigest()} of the bytes read, ETag "
                                     f"{listed.etag_md5} listed")
        return ReadObject(size, sha256.hexdigest(), now)

    return with_retries(copy, retries)
