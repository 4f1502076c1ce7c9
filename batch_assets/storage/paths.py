"""fsspec helpers that take a path as it is: never a glob, never a URL chain. No Dagster.

fsspec/s3fs read `[`, `]`, `*` and `?` in a path given to `rm`, `mv` or `copy` as a glob (a step key's
`[...]` is one), and `::` as a URL chain: storage, leases and commits go through these instead.
"""

from __future__ import annotations

import contextlib
import os

import fsspec


def protocol(fs: fsspec.AbstractFileSystem) -> str:
    """`fs`'s main protocol name ("file", "s3", ...)."""
    return fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether `fs` is the local filesystem (where folders, symlinks and permissions are real)."""
    return protocol(fs) in ("file", "local")


def fsync_folder(folder: str) -> None:
    """Flush a local folder's entries (a new or renamed file in it) to disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_path(fs: fsspec.AbstractFileSystem, path: str) -> None:
    """Remove one file. Not `fs.rm`: it expands `[`, `]`, `*` and `?` in the path as a glob."""
    if is_local(fs):
        os.remove(path)
    else:
        fs.rm_file(path)


def remove_empty_folders(root: str) -> None:
    """Remove the empty folders under `root` (deepest first), e.g. array folders of replaced versions."""
    for folder, _, _ in sorted(os.walk(root), key=lambda entry: entry[0].count(os.sep), reverse=True):
        if folder != root:
            with contextlib.suppress(OSError):  # not empty (or just written by a writer of another asset)
                os.rmdir(folder)
