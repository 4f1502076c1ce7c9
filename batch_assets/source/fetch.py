"""Read objects from storage with retries: transient errors (throttling, resets) must not lose a unit.

Storage clients retry some errors themselves; what still escapes them is retried here with exponential
backoff. A unit that fails every attempt gets the class `fetch_failed` with the last error as reason;
it never fails the partition. Permanent errors (the object is gone, permission or access denied, no such
bucket) are not retried: waiting cannot fix them, so the unit is classed at once.

A local object is opened beneath its partition folder without following any symlink (`O_NOFOLLOW` on
every path component, `open_confined`), both when it is listed and when it is read again to be decoded:
a file swapped for a symlink in between is not read (`ChangedSinceListed`), wherever the link points.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
import time
from collections.abc import Callable, Mapping
from typing import BinaryIO, TypeVar

T = TypeVar("T")
CHUNK = 8 * 2**20


class FetchError(Exception):
    """The object could not be read after every retry; the message is the recorded reason."""


class ChangedSinceListed(Exception):
    """The object is no longer the one listed (now a symlink or not a file, or other bytes); not retried."""


_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def open_confined(root: str, rel: str) -> BinaryIO:
    """`root/rel` opened for reading, no symlink followed below `root` (every component opened `O_NOFOLLOW`)."""
    parts = rel.split("/")
    folder = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in parts[:-1]:
            inner = os.open(part, _FLAGS | os.O_DIRECTORY, dir_fd=folder)
            os.close(folder)
            folder = inner
        leaf = os.open(parts[-1], _FLAGS | getattr(os, "O_NONBLOCK", 0), dir_fd=folder)  # a FIFO must not block us
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise ChangedSinceListed(f"{rel!r} is now reached through a symlink (not read)") from None
        raise
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(leaf).st_mode):
        os.close(leaf)
        raise ChangedSinceListed(f"{rel!r} is no longer a regular file (not read)")
    os.set_blocking(leaf, True)
    return os.fdopen(leaf, "rb")


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    base_delay_s: float = 0.5

    def delays(self) -> list[float]:
        return [self.base_delay_s * 2**i for i in range(self.attempts - 1)]


DEFAULT_RETRIES = RetryPolicy()


def retries_of_run(run_config: Mapping) -> RetryPolicy:
    """The read retries a run gives `fetched_audio` (`retry_attempts`, `retry_base_delay_seconds`; the defaults
    where it gives none): the GPU step reads each object whole with the same policy as the listing read its head."""
    config = ((run_config.get("ops") or {}).get("fetched_audio") or {}).get("config") or {}
    return RetryPolicy(int(config.get("retry_attempts", DEFAULT_RETRIES.attempts)),
                       float(config.get("retry_base_delay_seconds", DEFAULT_RETRIES.base_delay_s)))


def with_retries(action: Callable[[], T], policy: RetryPolicy = DEFAULT_RETRIES) -> T:
    last: Exception | None = None
    delays = policy.delays()
    for attempt in range(policy.attempts):
        try:
            return action()
        except ChangedSinceListed:
            raise
        except FileNotFoundError as error:  # not transient: the object (or its bucket) is gone
            raise FetchError(f"object disappeared (not retried): {error}") from None
        except PermissionError as error:  # not transient: access denied
            raise FetchError(f"permission denied (not retried): {error}") from None
        except Exception as error:  # network, throttling, server errors
            last = error
            if attempt < len(delays):
                time.sleep(delays[attempt])
    raise FetchError(f"read failed after {policy.attempts} attempts: {type(last).__name__}: {str(last)[:200]}")


