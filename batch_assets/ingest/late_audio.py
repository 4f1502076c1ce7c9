"""What changed in a published day's source since its manifest was made: new objects, changed ones, gone ones.

Why: a day is transcribed once, at 06:00 UTC the next morning; an upload that lands later, or a file sent again,
would stay out of the tables until someone reran the day. The late-audio sensor
(`orchestration/late_audio.py`) lists each recently published day with `list_versions` (a listing: one LIST per
1,000 objects on S3, one `stat` per file locally; no object is opened), and `late_changes` compares it with the
day's manifest (`fetched_audio`) and published units (`transcripts`):

- **new**: an audio object the manifest does not hold, or holds but the tables do not (a run that listed it
  failed before publishing);
- **changed**: an identity other than the manifest's, compared on what both carry (`source/identity.py`: locally
  size and modification time, on S3 size and ETag: a listing gives no VersionId), or a unit the listing could not
  describe then (no identity recorded: an object still uploading, a storage error) that is listed now, or a unit
  the tables hold unread (`fetch_failed`, `changed_since_listed`: a read that failed is tried again, once per
  identity); a key the manifest rejected is never retried;
- **gone**: a published unit the source no longer lists. Reported, never removed: its rows stay until someone
  reruns the whole day.

The run asked for re-lists only the new and changed keys (`FetchConfig.units`) and reruns only those units
(`units` of the GPU section); every other row of the day is kept. No Dagster.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import polars as pl

from batch_assets.ingest.manifest import list_local
from batch_assets.ingest.units import is_audio, relative_key, storable
from batch_assets.schema.results import UNREAD_CLASSES, ResultClass
from batch_assets.source.identity import ObjectVersion
from batch_assets.storage.paths import is_local


@dataclasses.dataclass(frozen=True)
class LateChanges:
    """One day's difference between its source and its manifest; keys are relative keys, sorted."""

    partition: str
    listed: int  # audio objects listed
    new: tuple[str, ...]
    changed: tuple[str, ...]
    gone: tuple[str, ...]
    versions: tuple[tuple[str, int, str], ...]  # (key, size, identity token) of each new and changed object, as listed

    @property
    def units(self) -> list[str]:
        """The keys a late run transcribes: the new and the changed ones."""
        return sorted(self.new + self.changed)

    @property
    def run_key(self) -> str:
        """The same for the same objects in the same versions: a run is asked for once per change."""
        return f"late-{self.partition}-{_digest(self.versions)}"

    @property
    def gone_key(self) -> str:
        """The same for the same set of gone objects: it is told once."""
        return _digest(self.gone)

    def describe(self) -> str:
        parts = [f"{len(self.new)} new", f"{len(self.changed)} changed", f"{len(self.gone)} gone"]
        return f"{self.partition}: {', '.join(parts)} of {self.listed} audio objects listed"


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


def list_versions(fs, partition_path: str) -> dict[str, ObjectVersion]:
    """Relative key -> size and version of every audio object under the day's folder, as listed (nothing opened).
    Locally symlinks are left out (the manifest refuses them or lists their targets); on a store the version is
    its ETag (a listing gives no VersionId)."""
    if is_local(fs):
        paths, _, _ = list_local(partition_path)
        out = {}
        for path in paths:
            if os.path.islink(path) or not is_audio(path):
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:  # gone between the walk and the stat
                continue
            out[storable(relative_key(partition_path, path))] = ObjectVersion(st.st_size, mtime_ns=st.st_mtime_ns)
        return out
    fs.invalidate_cache(partition_path)  # this process lists again every tick: never the cached listing
    if not fs.exists(partition_path):
        return {}
    found = fs.find(partition_path, withdirs=False, detail=True)
    return {storable(relative_key(partition_path, path)): ObjectVersion.of_info(info)
            for path, info in sorted(found.items()) if is_audio(path)}


def late_changes(partition: str, listed: dict[str, ObjectVersion], manifest: pl.DataFrame,
                 published: dict[str, str]) -> LateChanges:
    """Compare a day's listing with its manifest (`fetched_audio`) and its published units (`transcripts`: unit id
    -> result class)."""
    recorded = {row["relative_key"]: row for row in manifest.iter_rows(named=True)}
    new, changed = [], []
    for key, now in listed.items():
        row = recorded.get(key)
        if row is None or row["unit_id"] not in published:
            new.append(key)
        elif row["result_class"] == str(ResultClass.REJECTED_KEY):
            continue  # the key itself is refused: no later listing changes that
        elif row["bytes"] is None or ObjectVersion.of_row(row).differs(now) is not None \
                or published[row["unit_id"]] in UNREAD_CLASSES:
            changed.append(key)
    gone = [key for key, row in recorded.items() if key not in listed and row["unit_id"] in published
            and row["result_class"] != str(ResultClass.REJECTED_KEY)]
    versions = tuple((key, listed[key].size, listed[key].token()) for key in sorted(new + changed))
    return LateChanges(partition, len(listed), tuple(sorted(new)), tuple(sorted(changed)), tuple(sorted(gone)),
                       versions)
