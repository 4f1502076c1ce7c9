"""Read objects from storage with retries: transient errors (throttling, resets) must not lose a unit."""

from __future__ import annotations

import time

import fsspec

RETRY_DELAYS_S = (0.5, 1.0, 2.0)


class FetchError(Exception):
    """The object could not be read after every retry; the message is the recorded reason."""


def read_bytes(fs: fsspec.AbstractFileSystem, path: str, delays: tuple[float, ...] = RETRY_DELAYS_S) -> bytes:
    last: Exception | None = None
    for attempt in range(len(delays) + 1):
        try:
            with fs.open(path, "rb") as handle:
                return handle.read()
        except FileNotFoundError as error:  # not transient: the object is gone
            raise FetchError(f"object disappeared: {error}") from None
        except Exception as error:  # network, throttling, server errors
            last = error
            if attempt < len(delays):
                time.sleep(delays[attempt])
    raise FetchError(f"read failed after {len(delays) + 1} attempts: {type(last).__name__}: {str(last)[:200]}")
