"""What identifies a source object's bytes without reading them, as typed fields, and when two of them differ.

Why: the listing (`ingest/manifest.py`), the GPU step's read (`source/objects.py`) and the late-audio sensor's
listing (`ingest/late_audio.py`) each see an object's identity through a different request, and each sees only
part of it:

| where | size | ETag | VersionId | mtime_ns |
|---|---|---|---|---|
| S3 HEAD or GET (the manifest, the GPU step) | yes | yes | on a bucket that keeps (or kept) versions | - |
| S3 ListObjectsV2 (the sensor) | yes | yes | never | - |
| a local file's `fstat` | yes | - | - | yes |

So two identities are compared only on the fields both carry (`differs`): a versioned bucket's listing and its
GET agree on an object they both saw (the versioning bug of issue 64: the recorded string held a VersionId that a
listing never carries). The ETag is compared as an opaque token, never as an MD5 of the bytes: SSE-KMS and SSE-C
objects and multipart uploads have ETags that are not. S3 says "null" for the VersionId of an object written while
versioning was never enabled or suspended; that is no version to pin, and is stored as null. No Dagster.
"""

from __future__ import annotations

import dataclasses
import re

import polars as pl

# the manifest's identity columns (`ObjectVersion.columns`), also what a flight's fingerprint reads
IDENTITY_SCHEMA = {"bytes": pl.Int64, "etag": pl.String, "version_id": pl.String, "mtime_ns": pl.Int64}


@dataclasses.dataclass(frozen=True)
class ObjectVersion:
    """An object's identity as one request saw it: its size and whichever of the store's identifiers it gave."""

    size: int
    etag: str | None = None  # the S3 ETag, unquoted; an opaque token (not an MD5 under SSE-KMS/SSE-C or multipart)
    version_id: str | None = None  # the S3 VersionId, where the bucket keeps versions ("null" is stored as None)
    mtime_ns: int | None = None  # a local file's modification time

    @classmethod
    def of_s3(cls, size: int, etag: str | None, version_id: str | None) -> ObjectVersion:
        """From an S3 answer's fields (a HEAD, a GET, a listing's entry)."""
        etag = (etag or "").strip().strip('"') or None
        return cls(int(size), etag, None if version_id in (None, "", "null") else str(version_id))

    @classmethod
    def of_info(cls, info: dict) -> ObjectVersion:
        """From an fsspec `info`/`find(detail=True)` entry of an object store."""
        return cls.of_s3(info["size"], info.get("ETag") or info.get("etag"),
                         info.get("VersionId") or info.get("version_id"))

    @classmethod
    def of_legacy(cls, size: int, version: str | None) -> ObjectVersion:
        """From a manifest written before issue 64: its one `version` string ('etag "…"', ' version_id …', or
        'mtime_ns …')."""
        found = dict(re.findall(r'(etag|version_id|mtime_ns) "?([^"\s]+)"?', version or ""))
        mtime = found.get("mtime_ns")
        return cls.of_s3(size, found.get("etag"), found.get("version_id")) if mtime is None else cls(
            int(size), mtime_ns=int(mtime))

    @classmethod
    def of_row(cls, row: dict) -> ObjectVersion:
        """From a manifest row (`columns`)."""
        return cls(int(row["bytes"]), row.get("etag"), row.get("version_id"), row.get("mtime_ns"))

    def columns(self) -> dict:
        """The manifest's columns for this identity (`IDENTITY_SCHEMA`)."""
        return {"bytes": self.size, "etag": self.etag, "version_id": self.version_id, "mtime_ns": self.mtime_ns}

    def differs(self, now: ObjectVersion) -> str | None:
        """Why `now` is not the object `self` identifies, comparing the fields both carry; None when it is."""
        if now.size != self.size:
            return f"now {now.size} bytes, listed {self.size} bytes"
        for name in ("etag", "version_id", "mtime_ns"):
            mine, theirs = getattr(self, name), getattr(now, name)
            if mine is not None and theirs is not None and mine != theirs:
                return f"{name} now {theirs}, listed {mine}"
        return None

    def token(self) -> str:
        """One string for the identity, stable across hosts and Python versions (flight fingerprints, run keys)."""
        return f"{self.size} {self.etag or '-'} {self.version_id or '-'} {self.mtime_ns if self.mtime_ns else '-'}"


def identity_columns(frame: pl.DataFrame) -> list[ObjectVersion | None]:
    """Each row's identity (None where the listing recorded none: a row that was never opened)."""
    return [None if row["bytes"] is None else ObjectVersion.of_row(row)
            for row in frame.select(list(IDENTITY_SCHEMA)).iter_rows(named=True)]
