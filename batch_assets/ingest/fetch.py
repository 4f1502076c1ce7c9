"""Read objects from storage with retries: transient errors (throttling, resets) must not lose a unit.

Storage clients retry some errors themselves; what still escapes them is retried here with exponential
backoff. A unit that fails every attempt gets the class `fetch_failed` with the last error as reason;
it never fails the partition. Permanent errors (the object is gone, permission or access denied, no such
bucket) are not retried: waiting cannot fix them, so the unit is classed at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from typing import BinaryIO, TypeVar

import fsspec

T = TypeVar("T")
CHUNK = 8 * 2**20


class FetchError(Exception):
    """The object could not be read after every retry; the message is the recorded reason."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4
    base_delay_s: float = 0.5

    def delays(self) -> list[float]:
        return [self.base_delay_s * 2**i for i in range(self.attempts - 1)]


DEFAULT_RETRIES = RetryPolicy()


def with_retries(action: Callable[[], T], policy: RetryPolicy = DEFAULT_RETRIES) -> T:
    last: Exception | None = None
    delays = policy.delays()
    for attempt in range(policy.attempts):
        try:
            return action()
        except FileNotFoundError as error:  # not transient: the object (or its bucket) is gone
            raise FetchError(f"object disappeared (not retried): {error}") from None
        except PermissionError as error:  # not transient: access denied
            raise FetchError(f"permission denied (not retried): {error}") from None
        except Exception as error:  # network, throttling, server errors
            last = error
            if attempt < len(delays):
                time.sleep(delays[attempt])
    raise FetchError(f"read failed after {policy.attempts} attempts: {type(last).__name__}: {str(last)[:200]}")


def read_bytes(fs: fsspec.AbstractFileSystem, path: str, policy: RetryPolicy = DEFAULT_RETRIES) -> bytes:
    def read() -> bytes:
        with fs.open(path, "rb") as handle:
            return handle.read()

    return with_retries(read, policy)


def download(fs: fsspec.AbstractFileSystem, path: str, dest: BinaryIO, policy: RetryPolicy = DEFAULT_RETRIES) -> tuple[int, str]:
    """Stream an object into `dest` in chunks (memory stays flat); returns (bytes, sha256 hex)."""

    def copy() -> tuple[int, str]:
        dest.seek(0)
        dest.truncate()
        digest, size = hashlib.sha256(), 0
        with fs.open(path, "rb", block_size=CHUNK) as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
                dest.write(chunk)
                size += len(chunk)
        dest.flush()
        return size, digest.hexdigest()

    return with_retries(copy, policy)
