"""Units: one listed audio object each, with an id that is unique, stable and safe as a file name.

The unit id is the object's path relative to the partition folder with "/" turned into "__", whenever
that spelling can be read back to exactly one key: an audio extension, every character in
[A-Za-z0-9._-], no path segment holding "__" or starting or ending with "_", no run of dots, no leading
dot, and at most `MAX_UNIT_ID` characters. Any other key gets a readable slug (unsafe characters
replaced, cut to fit) followed by "-" and 16 hex digits of the sha256 of the full key. So an id depends
on its own key only (it does not change when other keys appear or disappear), two keys never share one
(a plain id ends in an audio extension, a hashed one in hex digits), and no id is longer than
`MAX_UNIT_ID`.

Before this scheme (batch_assets up to issue 20) a hash (sha1, 8 digits) was added when the slug changed
the key or when another key of the day produced the same slug (so an id could change when another key
appeared), and ids were cut at 200 characters afterwards, hash included. Tables written
then stay readable: ids are read from the tables, never recomputed. Rerunning `fetched_audio` for such
a day lists it afresh with the current ids; units whose id changed are rewritten under the new id by
the same run's later steps (a whole-partition rerun replaces every table). Plain keys keep their ids.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import unicodedata

from batch_assets.source.decode import AUDIO_EXTENSIONS

MAX_UNIT_ID = 200
HASH_DIGITS = 16
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]|\.{2,}|^\.")  # outside [A-Za-z0-9._-], runs of dots, a leading dot
_PLAIN_SEGMENT = re.compile(r"(?!_)(?!.*__)[A-Za-z0-9._-]*(?<!_)")
# What a key must not hold: controls (C0, DEL, C1), line and paragraph separators, and the bidirectional
# marks, overrides and isolates that make a name display as another (joiners such as U+200C, common in names,
# pass), and lone surrogates (a local file name that is not UTF-8)
_REFUSED_CATEGORIES = {"Cc": "a control character", "Zl": "a line separator", "Zp": "a paragraph separator",
                       "Cs": "bytes that are not UTF-8"}
_BIDI_CONTROLS = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def relative_key(partition_path: str, object_path: str) -> str:
    prefix = partition_path.rstrip("/") + "/"
    if not object_path.startswith(prefix):
        raise ValueError(f"{object_path!r} is not under {partition_path!r}")
    return object_path[len(prefix) :]


def storable(text: str) -> str:
    """`text` as a table can hold it: a local name that is not UTF-8 (lone surrogates) with its bytes as `\\xNN`."""
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        return text
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def escaped(key: str) -> str:
    """A key as it may appear in a log line or a reason: quoted, every unprintable character escaped (repr)."""
    return repr(key)


def key_problem(rel: str) -> str | None:
    """Why a key must be refused (it could escape the storage root, or forge log lines or names), or None."""
    if rel.startswith("/") or "\\" in rel:
        return f"key {escaped(rel)} is absolute or uses backslashes"
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"key {escaped(rel)} has empty, '.' or '..' path segments"
    for ch in rel:
        what = "a bidirectional control" if ch in _BIDI_CONTROLS else _REFUSED_CATEGORIES.get(unicodedata.category(ch))
        if what:
            return f"key {escaped(rel)} contains {what} (U+{ord(ch):04X}); rename the object"
    return None


def is_audio(path: str) -> bool:
    return posixpath.splitext(path)[1].lower() in AUDIO_EXTENSIONS


def unit_id(rel: str) -> str:
    """The key's id: its plain spelling when that reads back to it alone, else a slug plus a hash of the key."""
    plain = rel.replace("/", "__")
    if len(plain) <= MAX_UNIT_ID and is_audio(rel) and all(_PLAIN_SEGMENT.fullmatch(part) for part in rel.split("/")) \
            and not _UNSAFE.search(plain):
        return plain
    digest = hashlib.sha256(rel.encode("utf-8", "surrogateescape")).hexdigest()[:HASH_DIGITS]
    return f"{_UNSAFE.sub('_', plain)[: MAX_UNIT_ID - HASH_DIGITS - 1]}-{digest}"


class UnitIdCollision(ValueError):
    """Two keys of one day with the same unit id."""


def unit_ids(rel_keys: list[str]) -> list[str]:
    """Each key's id (same order); two keys with one id (a sha256 collision) is refused before anything is written."""
    ids = [unit_id(rel) for rel in rel_keys]
    if len(set(ids)) != len(ids):
        seen: dict[str, str] = {}
        for rel, uid in zip(rel_keys, ids, strict=True):
            if uid in seen:
                raise UnitIdCollision(f"keys {escaped(seen[uid])} and {escaped(rel)} have the same unit_id {uid!r}")
            seen[uid] = rel
    return ids
