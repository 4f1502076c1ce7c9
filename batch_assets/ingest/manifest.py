"""Build a partition's manifest: every listed audio object, exactly once, with a result class.

Listing is recursive under the partition prefix and sorted, so the manifest (and every id derived from
it) is deterministic. Objects are fetched concurrently (threads: the work is IO), checksummed and
probed; nothing is decoded in full here.
"""

from __future__ import annotations

import concurrent.futures
import hashlib

import polars as pl

from batch_assets.audio.decode import DecodeError, probe, suffix_of
from batch_assets.ingest.fetch import FetchError, read_bytes
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


def list_partition(fs, partition_path: str) -> tuple[list[str], int]:
    """(sorted audio object paths, number of non-audio objects skipped)."""
    if not fs.exists(partition_path):
        return [], 0
    paths = sorted(fs.find(partition_path, withdirs=False))
    audio = [p for p in paths if is_audio(p)]
    return audio, len(paths) - len(audio)


def _describe(fs, protocol: str, path: str, rel: str, max_unit_s: float) -> dict:
    row = {"source_uri": f"{protocol}://{path}" if protocol not in ("file", "local") else path, "relative_key": rel}
    problem = key_problem(rel)
    if problem:
        return row | {"result_class": ResultClass.REJECTED_KEY, "reason": problem}
    try:
        data = read_bytes(fs, path)
    except FetchError as error:
        return row | {"result_class": ResultClass.FETCH_FAILED, "reason": str(error)}
    row |= {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if not data:
        return row | {"result_class": ResultClass.EMPTY, "reason": "zero bytes"}
    try:
        info = probe(data, suffix_of(rel))
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


def build_manifest(fs, partition_path: str, max_unit_s: float, concurrency: int) -> tuple[pl.DataFrame, int]:
    paths, skipped = list_partition(fs, partition_path)
    rels = [relative_key(partition_path, p) for p in paths]
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        rows = list(pool.map(lambda pr: _describe(fs, protocol, pr[0], pr[1], max_unit_s), zip(paths, rels, strict=True)))
    for row, uid in zip(rows, unit_ids(rels), strict=True):
        row["unit_id"] = uid
        row["result_class"] = str(row["result_class"])
    return pl.DataFrame(rows, schema=MANIFEST_SCHEMA), skipped
