"""Units: one listed audio object each, with a stable id that is safe as a file name.

The unit id is the object's path relative to the partition folder, with "/" turned into "__" and any
character outside [A-Za-z0-9._-] (and any run of dots, or a leading dot) replaced; when that changed anything else (or two keys collide) a
short hash of the original key is appended, so ids stay unique and stable across reruns.
"""

from __future__ import annotations

import hashlib
import posixpath
import re

from batch_assets.audio.decode import AUDIO_EXTENSIONS

# Characters outside [A-Za-z0-9._-], runs of dots, and a leading dot (no "..", no hidden files).
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]|\.{2,}|^\.")


def relative_key(partition_path: str, object_path: str) -> str:
    prefix = partition_path.rstrip("/") + "/"
    if not object_path.startswith(prefix):
        raise ValueError(f"{object_path!r} is not under {partition_path!r}")
    return object_path[len(prefix) :]


def key_problem(rel: str) -> str | None:
    """Why a key must be refused (it could escape the storage root), or None."""
    if rel.startswith("/") or "\\" in rel:
        return f"key {rel!r} is absolute or uses backslashes"
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"key {rel!r} has empty, '.' or '..' path segments"
    if any(ord(ch) < 32 for ch in rel):
        return f"key {rel!r} contains control characters"
    return None


def is_audio(path: str) -> bool:
    return posixpath.splitext(path)[1].lower() in AUDIO_EXTENSIONS


def unit_ids(rel_keys: list[str]) -> list[str]:
    """Stable, unique, file-name-safe ids for the keys (same order)."""
    slugs = [_UNSAFE.sub("_", rel.replace("/", "__")) for rel in rel_keys]
    counts: dict[str, int] = {}
    for slug in slugs:
        counts[slug] = counts.get(slug, 0) + 1
    ids = []
    for rel, slug in zip(rel_keys, slugs, strict=True):
        lossless = slug == rel.replace("/", "__")
        if not lossless or counts[slug] > 1:
            slug = f"{slug}-{hashlib.sha1(rel.encode()).hexdigest()[:8]}"
        ids.append(slug[:200])
    return ids
