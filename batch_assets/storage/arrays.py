"""Arrays as stored: `.npy` bytes whose header is checked before they are written, and a flight read unit by unit.

`npy_bytes`: issue 46 found `.npy` files published unreadable (NeMo's NVRTC log had overwritten CPython's shared
`b" "`, which numpy pads headers with): bytes whose header does not parse back to the array's dtype and shape are
refused, never written.

`read_flight`: a flight is one float32 vector (`ingest/prepare.py`), its units' samples one after another. The GPU
step reads its header, then each unit's bytes as a ranged read of its own (one GET with a Range on S3), a bounded
pool of them at once, so a flight of eight units waits for one object-storage round trip, not eight. The bytes
are the file's: the array is the one `np.load` gives.
"""

from __future__ import annotations

import concurrent.futures
import io
import time
from collections.abc import Callable

import numpy as np

FLIGHT_HEADER_BYTES = 4096  # read first from a flight's .npy: its header (128 bytes for a float32 vector)


class UnreadableArray(ValueError):
    """`np.save`'s bytes do not load back as the array saved: they are not written (published files nobody can open
    are lost data)."""


def npy_header(stream: io.BytesIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran order, dtype) from the `.npy` header at the start of `stream`, which is left at the data;
    numpy's own error for a header it cannot parse (ValueError; on Python 3.12 tokenize.TokenError for NULs)."""
    version = np.lib.format.read_magic(stream)
    header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return header(stream)


def npy_bytes(array: np.ndarray, url: str) -> bytes:
    """`array` as `.npy` bytes, their header checked to parse back to its dtype and shape (the data after it is the
    array's own bytes) before anything is written: a damaged interpreter (`gpu/device/faults.py: check_interpreter`)
    writes NUL header padding."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    data = buffer.getvalue()
    try:
        shape, _, dtype = npy_header(io.BytesIO(data))
    except Exception as error:  # numpy raises ValueError, or on 3.12 tokenize.TokenError, for a damaged header
        raise UnreadableArray(f"{url}: the .npy bytes made for it do not load back ({type(error).__name__}: "
                              f"{str(error)[:200]}); nothing written. A damaged interpreter (gpu/device/faults.py: "
                              "check_interpreter) does this: rerun in a fresh process") from None
    if dtype != array.dtype or shape != array.shape:
        raise UnreadableArray(f"{url}: the .npy bytes made for it load back as {dtype} {shape}, not "
                              f"{array.dtype} {array.shape}; nothing written")
    return data


def read_flight(fs, path: str, spans: list[tuple[int, int]], workers: int, latency_s: float,
                read_whole: Callable[[], np.ndarray]) -> np.ndarray:
    """The float32 vector at `path`, each of `spans` (offset and count, in samples, covering it in order) a ranged
    read, `workers` at a time (one: one after another), each after `latency_s` of simulated latency (benchmarks).
    A file that is not one little-endian float32 vector covered by `spans` is read whole (`read_whole`)."""
    head = io.BytesIO(fs.cat_file(path, start=0, end=FLIGHT_HEADER_BYTES))  # keywords: s3fs's 2nd is version_id
    try:
        shape, fortran, dtype = npy_header(head)
    except ValueError:  # a header beyond the first read, or not an .npy: the whole read says what is wrong
        shape, fortran, dtype = None, False, None
    covered = sum(n for _, n in spans)
    in_order = all(a[0] + a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False)) and (
        not spans or spans[0][0] == 0)
    if dtype != np.dtype("<f4") or fortran or shape != (covered,) or not in_order:
        time.sleep(latency_s * len(spans))
        return read_whole()
    start, audio = head.tell(), np.empty(covered, dtype=np.float32)
    into = memoryview(audio).cast("B")

    def fetch(span: tuple[int, int]) -> None:
        time.sleep(latency_s)
        first, last = span[0] * 4, (span[0] + span[1]) * 4
        into[first:last] = fs.cat_file(path, start=start + first, end=start + last)

    with concurrent.futures.ThreadPoolExecutor(max(1, workers), thread_name_prefix="fetch-unit") as pool:
        list(pool.map(fetch, spans))
    return audio
