"""Build a partition's manifest: every listed audio object, exactly once, with a result class.

Listing is recursive under the partition prefix and sorted, so the manifest (and every id derived from
it) is deterministic. Objects are fetched concurrently (threads: the work is IO), streamed in chunks
to a temporary file while being checksummed (memory stays flat whatever the object size), and probed
from that file's header; nothing is decoded in full here. Objects whose extension is not a supported
audio format are not units, but they are listed in a `skipped` table so that nothing disappears silently.
"""

from __future__ import annotations

import concurrent.futures
import os
import posixpath
import tempfile

import polars as pl

from batch_assets.audio.decode import AUDIO_EXTENSIONS, DecodeError, probe_file, suffix_of
from batch_assets.ingest.fetch import DEFAULT_RETRIES, FetchError, RetryPolicy, download
from batch_assets.ingest.units import is_audio, key_problem, relative_key, unit_ids
from batch_assets.results import ResultClass

MANIFEST_SCHEMA = {
    "unit_id": pl.String,
    "source_uri": pl.String,
    "relative_key": pl.String,
    "bytes": pl.Int64,
    "sha256": pl.String,
    "duration_s": pl.Float64,
    "sample_rate": pl.Int64,
    "channels": pl.Int64,
    "result_class": pl.String,
    "reason": pl.String,
}
SKIPPED_SCHEMA = {"source_uri": pl.String, "relative_key": pl.String, "reason": pl.String}
TMP_DIR = os.environ.get("BATCH_ASSETS_TMP_DIR")  # where objects are staged while probed (default: system temp)


def list_partition(fs, partition_path: str) -> list[str]:
    """Every object under the partition prefix, recursively, sorted."""
    if not fs.exists(partition_path):
        return []
    return sorted(fs.find(partition_path, withdirs=False))


def uri_of(fs, path: str) -> str:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return path if protocol in ("file", "local") else f"{protocol}://{path}"


def describe_object(fs, path: str, rel: str, max_unit_s: float, retries: RetryPolicy = DEFAULT_RETRIES) -> dict:
    """One manifest row (without unit_id): fetch, checksum, probe, classify."""
    row: dict = {"source_uri": uri_of(fs, path), "relative_key": rel}
    problem = key_problem(rel)
    if problem:
        return row | {"result_class": ResultClass.REJECTED_KEY, "reason": problem}
    with tempfile.NamedTemporaryFile(suffix=suffix_of(rel), dir=TMP_DIR) as staged:
        try:
            size, sha256 = download(fs, path, staged, retries)
        except FetchError as error:
            return row | {"result_class": ResultClass.FETCH_FAILED, "reason": str(error)}
        row |= {"bytes": size, "sha256": sha256}
        if size == 0:
            return row | {"result_class": ResultClass.EMPTY, "reason": "zero bytes"}
        try:
            info = probe_file(staged.name)
        except DecodeError as error:
            return row | {"result_class": ResultClass.UNDECODABLE, "reason": str(error)}
    row |= {"duration_s": info.duration_s, "sample_rate": info.sample_rate, "channels": info.channels}
    if info.frames == 0:
        return row | {"result_class": ResultClass.EMPTY, "reason": "zero samples"}
    if info.duration_s > max_unit_s:
        return row | {
            "result_class": ResultClass.TOO_LONG,
            "reason": f"{info.duration_s:.1f} s is over the group limit of {max_unit_s:.0f} s",
        }
    return row | {"result_class": ResultClass.OK, "reason": ""}


def build_manifest(
    fs, partition_path: str, max_unit_s: float, concurrency: int, retries: RetryPolicy = DEFAULT_RETRIES
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(manifest, skipped non-audio objects) for one partition."""
    listed = list_partition(fs, partition_path)
    audio = [p for p in listed if is_audio(p)]
    skipped = [
        {"source_uri": uri_of(fs, p), "relative_key": relative_key(partition_path, p),
         "reason": f"extension {posixpath.splitext(p)[1] or '(none)'!r} is not one of {', '.join(AUDIO_EXTENSIONS)}"}
        for p in listed if not is_audio(p)
    ]
    rels = [relative_key(partition_path, p) for p in audio]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        rows = list(pool.map(lambda pr: describe_object(fs, pr[0], pr[1], max_unit_s, retries), zip(audio, rels, strict=True)))
    for row, uid in zip(rows, unit_ids(rels), strict=True):
        row["unit_id"] = uid
        row["result_class"] = str(row["result_class"])
    return pl.DataFrame(rows, schema=MANIFEST_SCHEMA), pl.DataFrame(skipped, schema=SKIPPED_SCHEMA)
