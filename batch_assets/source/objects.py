"""A source object's head read in ranges and its body read once, each tied to the identity it was listed with.

Why: listing (`ingest/manifest.py`) reads only what it needs to plan (the identity, and the header through
`source/header_probe.py`); the GPU step reads each object once, to decode it (`source/flight_audio.py`), and must
know it read the object that was listed. The identity (`source/identity.py`) is what the store says before any
byte is read, and every byte read is tied to it:

- **S3**: the listing sends a HEAD (size, ETag, VersionId where the bucket keeps versions), then ranged GETs with
  `If-Match: <ETag>` (and the VersionId, when there is one). The GPU step's GETs carry the listed ETag and
  VersionId the same way: on a versioned bucket it reads the version listed even after a newer one lands (the
  late-audio sensor lists the newer one); without versions a store that answers 412, or a GET whose ETag is not
  the listed one, means the object changed: `ChangedSinceListed`. The ETag is never taken for an MD5 (SSE-KMS,
  SSE-C and multipart ETags are not).
- **A local file**: opened beneath its partition folder without following any symlink (`fetch.open_confined`);
  size and modification time from its descriptor before the read and again after it.
- **Any other fsspec store**: its `info` (size, and an ETag if it gives one) before and after the read.

An object that is not the one listed, whichever way it changed, is `ChangedSinceListed`. No Dagster.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
from collections.abc import Callable, Iterator
from typing import BinaryIO

from batch_assets.ingest.units import relative_key
from batch_assets.source.fetch import (
    CHUNK,
    DEFAULT_RETRIES,
    ChangedSinceListed,
    RetryPolicy,
    open_confined,
    with_retries,
)
from batch_assets.source.identity import ObjectVersion
from batch_assets.storage.paths import is_local, protocol

ReadRange = Callable[[int, int], bytes]


@dataclasses.dataclass(frozen=True)
class ReadObject:
    """An object read whole: its size, sha256, and the identity it had when read."""

    size: int
    sha256: str
    version: ObjectVersion


def _local(fs, confine_to: str | None) -> bool:
    return confine_to is not None and is_local(fs)


def _is_s3(fs) -> bool:
    return protocol(fs) in ("s3", "s3a")


def _fd_version(handle: BinaryIO) -> ObjectVersion:
    st = os.fstat(handle.fileno())
    return ObjectVersion(st.st_size, mtime_ns=st.st_mtime_ns)


def _precondition_failed(error: OSError) -> bool:
    """s3fs's translation of a 412 (an `If-Match` the object no longer meets)."""
    cause = getattr(error, "__cause__", None)
    code = str(getattr(cause, "response", {}).get("Error", {}).get("Code", "")) if cause is not None else ""
    return code in ("PreconditionFailed", "412") or (error.errno == errno.EINVAL and "recondition" in str(error))


class _S3Object:
    """One S3 object: its identity from a HEAD, its bytes by ranged GETs pinned to an identity."""

    def __init__(self, fs, path: str):
        self.fs, self.path = fs, path
        self.bucket, self.key, _ = fs.split_path(path)

    def head(self) -> ObjectVersion:
        answer = self.fs.call_s3("head_object", Bucket=self.bucket, Key=self.key)
        return ObjectVersion.of_s3(answer["ContentLength"], answer.get("ETag"), answer.get("VersionId"))

    def read(self, pinned: ObjectVersion, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object `pinned` identifies (`ChangedSinceListed` when the store has other bytes
        under that identity's ETag)."""
        if end <= start:
            return b""
        pins = {"IfMatch": f'"{pinned.etag}"'} if pinned.etag else {}
        pins |= {"VersionId": pinned.version_id} if pinned.version_id else {}

        async def get() -> tuple[dict, bytes]:
            answer = await self.fs._call_s3("get_object", Bucket=self.bucket, Key=self.key,
                                            Range=f"bytes={start}-{end - 1}", **pins)
            try:
                return answer, await answer["Body"].read()
            finally:
                answer["Body"].close()

        from fsspec.asyn import sync

        try:
            answer, data = sync(self.fs.loop, get)
        except FileNotFoundError:
            if pinned.version_id is None:
                raise
            self.head()  # FileNotFoundError again when the object is gone; else it is there, in another version
            raise ChangedSinceListed(f"changed since listed: version {pinned.version_id} is no longer kept") from None
        except OSError as error:
            if _precondition_failed(error):
                raise ChangedSinceListed(f"changed since listed: the store no longer has ETag {pinned.etag}") from None
            raise
        now = ObjectVersion.of_s3(pinned.size, answer.get("ETag"), answer.get("VersionId"))
        if (why := pinned.differs(now)) is not None:  # a store that ignored If-Match
            raise ChangedSinceListed(f"changed while read: {why}")
        return data


@contextlib.contextmanager
def opened(fs, path: str, confine_to: str | None) -> Iterator[tuple[ObjectVersion, ReadRange]]:
    """(the object's identity now, a ranged reader `read(start, end)` of exactly those bytes); locally one confined
    descriptor read with `pread`, on S3 a HEAD then GETs pinned to it."""
    if _local(fs, confine_to):
        with open_confined(confine_to, relative_key(confine_to, path)) as handle:
            fd = handle.fileno()
            yield _fd_version(handle), lambda start, end: os.pread(fd, end - start, start)
        return
    if _is_s3(fs):
        source = _S3Object(fs, path)
        version = source.head()
        yield version, lambda start, end: source.read(version, start, end)
        return
    version = ObjectVersion.of_info(fs.info(path, refresh=True))
    yield version, lambda start, end: fs.cat_file(path, start=start, end=end)


def _chunks(fs, path: str, listed: ObjectVersion | None, confine_to: str | None) -> Iterator[bytes | ObjectVersion]:
    """The object's identity now (first), then its bytes in chunks: `listed`'s bytes, or `ChangedSinceListed`."""
    if _local(fs, confine_to):
        with open_confined(confine_to, relative_key(confine_to, path)) as handle:
            yield from _unchanged(handle, listed, lambda: _fd_version(handle))
        return
    if _is_s3(fs):
        source = _S3Object(fs, path)
        pinned = listed if listed is not None and listed.etag else source.head()
        yield pinned
        for start in range(0, pinned.size, CHUNK):
            yield source.read(pinned, start, min(pinned.size, start + CHUNK))
        return
    with fs.open(path, "rb", block_size=CHUNK) as handle:
        yield from _unchanged(handle, listed, lambda: ObjectVersion.of_info(fs.info(path, refresh=True)))


def _unchanged(handle: BinaryIO, listed: ObjectVersion | None,
               identity: Callable[[], ObjectVersion]) -> Iterator[bytes | ObjectVersion]:
    """`_chunks` of a store that pins nothing: the identity (`identity()`) before the read, checked against `listed`,
    then the bytes, then the identity again, which must not have moved."""
    before = identity()
    if listed is not None and (why := listed.differs(before)) is not None:
        raise ChangedSinceListed(f"changed since listed: {why}")
    yield before
    while chunk := handle.read(CHUNK):
        yield chunk
    if (why := before.differs(identity())) is not None:
        raise ChangedSinceListed(f"changed while read: {why}")


def read_once(fs, path: str, listed: ObjectVersion | None, dest: BinaryIO, confine_to: str | None,
              retries: RetryPolicy = DEFAULT_RETRIES) -> ReadObject:
    """Stream the object into `dest` (chunks: memory stays flat), hashing as it streams; `ChangedSinceListed` when
    it is not the object `listed`. `listed` None: whatever the object holds now (a sidecar). Retried (`retries`)
    on storage errors, from the start."""

    def copy() -> ReadObject:
        dest.seek(0)
        dest.truncate()
        sha256, size, now = hashlib.sha256(), 0, None
        for piece in _chunks(fs, path, listed, confine_to):
            if isinstance(piece, ObjectVersion):
                now = piece
                continue
            sha256.update(piece)
            dest.write(piece)
            size += len(piece)
        dest.flush()
        if listed is not None and size != listed.size:
            raise ChangedSinceListed(f"changed while read: {size} bytes read, {listed.size} listed")
        return ReadObject(size, sha256.hexdigest(), now)

    return with_retries(copy, retries)
