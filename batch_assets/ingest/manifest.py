"""Build a partition's manifest: every listed audio object, exactly once, with a result class.

Listing is recursive under the partition prefix and sorted, so the manifest (and every id derived from
it) is deterministic. Each object is described concurrently (threads: the work is IO) from its size, its
storage version (`source/objects.py`: S3 ETag and VersionId, local modification time) and its header, read
in ranges of its head (and tail) by `source/header_probe.py`: no object is downloaded whole here, nothing is
decoded. The GPU step reads each object once, to decode it, checks it is the version listed, and computes
its sha256 as it streams (`source/flight_audio.py`). Objects whose extension is not a supported
audio format are not units, but they are listed in a `skipped` table so that nothing disappears silently;
a unit's JSON sidecar (`call.flac.json`: speaker-count hints, `speaker_hints.py`) is listed there as a sidecar,
and read into the unit's `hint_*` columns (or, when it is bad, `hint_problem`), its `sidecar_language` and its
`sidecar_channels` (`unit_channels.py`).
"""

from __future__ import annotations

import concurrent.futures
import io
import os
import posixpath
from collections.abc import Iterator

import polars as pl

from batch_assets.ingest.speaker_hints import (
    MAX_SIDECAR_BYTES,
    SIDECAR_SUFFIX,
    HintError,
    parse_sidecar,
    sidecar_language,
    sidecar_object,
)
from batch_assets.ingest.unit_channels import ChannelChoiceError, sidecar_channels
from batch_assets.ingest.units import escaped, is_audio, key_problem, relative_key, storable, unit_ids
from batch_assets.schema.results import ResultClass
from batch_assets.source.decode import AUDIO_EXTENSIONS, DecodeError, suffix_of
from batch_assets.source.fetch import (
    DEFAULT_RETRIES,
    ChangedSinceListed,
    FetchError,
    RetryPolicy,
    with_retries,
)
from batch_assets.source.header_probe import RangedFile, probe_object
from batch_assets.source.identity import IDENTITY_SCHEMA, ObjectVersion
from batch_assets.source.objects import opened, read_once
from batch_assets.storage.paths import is_local, protocol

MANIFEST_SCHEMA = {
    "unit_id": pl.String,
    "source_uri": pl.String,
    "relative_key": pl.String,
    **IDENTITY_SCHEMA,
    "probe_bytes": pl.Int64,
    "duration_s": pl.Float64,
    "duration_estimated": pl.Boolean,
    "sample_rate": pl.Int64,
    "channels": pl.Int64,
    "result_class": pl.String,
    "reason": pl.String,
    "hint_num_speakers": pl.Int64,
    "hint_min_speakers": pl.Int64,
    "hint_max_speakers": pl.Int64,
    "hint_problem": pl.String,
    "sidecar_language": pl.String,
    "sidecar_channels": pl.String,  # the sidecar's channel keys, checked (JSON: `ingest/unit_channels.py`)
}
SKIPPED_SCHEMA = {"source_uri": pl.String, "relative_key": pl.String, "reason": pl.String}


def read_manifest(storage, partition: str) -> pl.DataFrame:
    """The partition's manifest (`fetched_audio`), in today's schema whenever it was written: one written before
    issue 64 has its `version` string parsed into the identity columns (`source/identity.py`), and the columns it
    lacks null (`duration_estimated` false). FileNotFoundError when there is none."""
    manifest = storage.read_parquet("fetched_audio", partition, "manifest")
    if "version" in manifest.columns:
        identities = [None if size is None else ObjectVersion.of_legacy(size, version).columns()
                      for size, version in zip(manifest["bytes"], manifest["version"], strict=True)]
        manifest = manifest.drop("version").with_columns(
            pl.Series(name, [None if i is None else i[name] for i in identities], dtype=IDENTITY_SCHEMA[name])
            for name in ("etag", "version_id", "mtime_ns"))
    missing = {name: pl.lit(False if name == "duration_estimated" else None, dtype=dtype)
               for name, dtype in MANIFEST_SCHEMA.items() if name not in manifest.columns}
    manifest = manifest.with_columns(value.alias(name) for name, value in missing.items())
    return manifest.select(*MANIFEST_SCHEMA, *[c for c in manifest.columns if c not in MANIFEST_SCHEMA])


def list_partition(fs, partition_path: str) -> list[str]:
    """Every object under the partition prefix, recursively, sorted."""
    if not fs.exists(partition_path):
        return []
    return sorted(fs.find(partition_path, withdirs=False))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _walk_local(partition_path: str) -> Iterator[tuple[str, bool]]:
    """(path, is a folder) for every entry under the folder, without following symlinks; folders only if links."""
    for folder, dirs, files in os.walk(partition_path, followlinks=False):
        yield from ((os.path.join(folder, name), True) for name in dirs if os.path.islink(os.path.join(folder, name)))
        yield from ((os.path.join(folder, name), False) for name in files)


def list_local(partition_path: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(listed paths sorted, {symlink: why it is refused}, {symlink: why it is not a unit of its own}) for a local
    folder."""
    if not os.path.isdir(partition_path):
        return [], {}, {}
    root = os.path.realpath(partition_path)
    listed, refused, aliases = [], {}, {}
    for path, is_folder in _walk_local(partition_path):
        listed.append(path)
        if not os.path.islink(path):
            continue
        rel, target = relative_key(partition_path, path), os.path.realpath(path)
        link = f"symlink {rel!r} -> {os.readlink(path)!r}"
        if not _inside(target, root):
            refused[path] = f"{link} resolves outside the partition folder; it was not read"
        elif is_folder:
            aliases[path] = f"{link} is a folder inside the partition: its files are listed under their real path"
        elif not os.path.isfile(target):
            refused[path] = f"{link} does not point to a file"
        elif is_audio(target):
            aliases[path] = f"{link} points to {relative_key(root, target)!r}, which is listed itself: read once"
        elif is_audio(path):  # nothing is read through a symlink (reads are O_NOFOLLOW):
            # name the file it points to instead
            refused[path] = (f"{link} points to {relative_key(root, target)!r}, which is not an audio file; "
                             "it was not read")
    return sorted(listed), refused, aliases


def uri_of(fs, path: str) -> str:
    return path if is_local(fs) else f"{protocol(fs)}://{path}"


def describe_object(
    fs, path: str, rel: str, max_recording_s: float, retries: RetryPolicy = DEFAULT_RETRIES, refused: str | None = None,
    partition_path: str | None = None,
) -> dict:
    """One manifest row (without unit_id): size, version, header probe, class. `refused`: why not to read it at all;
    `partition_path`: the folder a local object is opened beneath (no symlink followed)."""
    row: dict = {"source_uri": uri_of(fs, path), "relative_key": rel}
    problem = refused or key_problem(rel)
    if problem:
        return row | {"result_class": ResultClass.REJECTED_KEY, "reason": problem}

    def describe():
        with opened(fs, path, partition_path) as (version, read_range):
            if version.size == 0:
                return version, None, 0
            reader = RangedFile(version.size, read_range)
            try:
                return version, probe_object(reader, suffix_of(rel)), reader.bytes_read
            except DecodeError as error:  # its head was read all the same
                return version, error, reader.bytes_read

    try:
        version, info, probed = with_retries(describe, retries)
    except FetchError as error:
        return row | {"result_class": ResultClass.FETCH_FAILED, "reason": str(error)}
    except ChangedSinceListed as error:
        return row | {"result_class": ResultClass.CHANGED_SINCE_LISTED, "reason": str(error)}
    row |= version.columns() | {"probe_bytes": probed}
    if info is None:
        return row | {"result_class": ResultClass.EMPTY, "reason": "zero bytes"}
    if isinstance(info, DecodeError):
        return row | {"result_class": ResultClass.UNDECODABLE, "reason": str(info)}
    row |= {"duration_s": info.duration_s, "duration_estimated": info.estimated, "sample_rate": info.sample_rate,
            "channels": info.channels}
    if info.frames == 0:
        return row | {"result_class": ResultClass.EMPTY, "reason": "zero samples"}
    if info.duration_s > max_recording_s:
        return row | {
            "result_class": ResultClass.TOO_LONG,
            "reason": f"{info.duration_s:.1f} s is over the safety limit of {max_recording_s:.0f} s "
                      "(max_recording_seconds)",
        }
    return row | {"result_class": ResultClass.OK, "reason": ""}


def sidecar_hints(fs, path: str, rel: str, retries: RetryPolicy, partition_path: str) -> dict:
    """A unit's manifest columns from its sidecar: the hints, or why they were ignored (its name escaped), and the
    language it declares (as written: `ingest/unit_language.py` checks it)."""
    rel, buffer, language, channels, problems = escaped(rel), io.BytesIO(), {}, {}, []
    try:
        if (size := fs.size(path)) > MAX_SIDECAR_BYTES:  # never read a huge object into memory
            raise HintError(f"{rel}: {size} bytes, more than a sidecar's {MAX_SIDECAR_BYTES}")
        read_once(fs, path, None, buffer, partition_path, retries)
        declared = sidecar_language(buffer.getvalue(), rel)
        language = {} if declared is None else {"sidecar_language": storable(declared[:100])}
        try:
            chosen = sidecar_channels(sidecar_object(buffer.getvalue(), rel), rel)
            channels = {} if chosen is None else {"sidecar_channels": chosen}
        except (ChannelChoiceError, HintError) as error:
            problems.append(f"channel choices ignored: {error}")
        hints = parse_sidecar(buffer.getvalue(), rel)
    except (FetchError, ChangedSinceListed, HintError, OSError, ValueError) as error:
        problems.insert(0, f"speaker hints ignored: {error}")
        return language | channels | {"hint_problem": storable("; ".join(problems)[:500])}
    return (language | channels | {f"hint_{key}": value for key, value in hints.pipeline_kwargs().items()}
            | ({"hint_problem": storable("; ".join(problems)[:500])} if problems else {}))


def build_manifest(
    fs, partition_path: str, max_recording_s: float, concurrency: int, retries: RetryPolicy = DEFAULT_RETRIES,
    only: set[str] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(manifest, skipped non-audio objects) for one partition; with `only`, the manifest holds just the audio
    objects with those relative keys (the skipped table is the whole listing's)."""
    if is_local(fs):
        listed, refused, aliases = list_local(partition_path)
    else:  # object stores have no symlinks
        listed, refused, aliases = list_partition(fs, partition_path), {}, {}
    audio = [p for p in listed if p not in aliases and (is_audio(p) or p in refused)
             and (only is None or storable(relative_key(partition_path, p)) in only)]
    # only a unit read under its own, clean key has a sidecar (a refused key's is listed as any other .json)
    readable = {p for p in audio if p not in refused and key_problem(relative_key(partition_path, p)) is None}
    sidecars = {p.removesuffix(SIDECAR_SUFFIX): p for p in listed
                if p.endswith(SIDECAR_SUFFIX) and p.removesuffix(SIDECAR_SUFFIX) in readable
                and p not in refused | aliases}

    def why_skipped(p: str) -> str:
        if p in aliases:
            return aliases[p]
        if p in sidecars.values():
            unit = relative_key(partition_path, p.removesuffix(SIDECAR_SUFFIX))
            return f"sidecar: speaker-count hints, language and channel choices for {unit!r}"
        return f"extension {posixpath.splitext(p)[1] or '(none)'!r} is not one of {', '.join(AUDIO_EXTENSIONS)}"

    skipped = [{"source_uri": uri_of(fs, p), "relative_key": relative_key(partition_path, p), "reason": why_skipped(p)}
               for p in listed if p in aliases or not (is_audio(p) or p in refused)]
    rels = [relative_key(partition_path, p) for p in audio]
    ids = unit_ids(rels)  # before any read: ids that cannot be told apart fail here, with nothing written
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        rows = list(pool.map(lambda pr: describe_object(fs, pr[0], pr[1], max_recording_s, retries, refused.get(pr[0]),
                                                        partition_path),
                             zip(audio, rels, strict=True)))
    for row, uid, path in zip(rows, ids, audio, strict=True):
        row["unit_id"] = uid
        if path in sidecars:
            row |= sidecar_hints(fs, sidecars[path], relative_key(partition_path, sidecars[path]), retries,
                                 partition_path)
        row["result_class"] = str(row["result_class"])
        row["source_uri"], row["relative_key"] = storable(row["source_uri"]), storable(row["relative_key"])
    for row in skipped:
        row["source_uri"], row["relative_key"] = storable(row["source_uri"]), storable(row["relative_key"])
    return pl.DataFrame(rows, schema=MANIFEST_SCHEMA), pl.DataFrame(skipped, schema=SKIPPED_SCHEMA)


def relist(fs, partition_path: str, previous: pl.DataFrame, keys: list[str], max_recording_s: float,
           concurrency: int, retries: RetryPolicy = DEFAULT_RETRIES) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(manifest, skipped) of a day whose `previous` manifest stands but for `keys` (relative keys: new or changed
    objects, the late-audio sensor's), which are listed and described again; every other row is kept as it was. A
    new key no longer listed gets a `fetch_failed` row saying so (a changed one keeps its row): nothing asked for is
    lost. Rows in key order, as a whole listing writes them."""
    fresh, skipped = build_manifest(fs, partition_path, max_recording_s, concurrency, retries, only=set(keys))
    vanished = sorted(set(keys) - set(fresh["relative_key"]) - set(previous["relative_key"]))
    lost = pl.DataFrame([{"unit_id": uid, "source_uri": uri_of(fs, posixpath.join(partition_path, key)),
                          "relative_key": key, "result_class": str(ResultClass.FETCH_FAILED),
                          "reason": "listed as late audio, no longer in the source when this run listed it"}
                         for key, uid in zip(vanished, unit_ids(vanished), strict=True)], schema=MANIFEST_SCHEMA)
    kept = previous.filter(~pl.col("relative_key").is_in(fresh["relative_key"].to_list()))
    manifest = pl.concat([kept, fresh, lost], how="vertical").sort("relative_key", maintain_order=True)
    unit_ids(manifest["relative_key"].to_list())  # the merged day's ids are still told apart
    return manifest, skipped
