"""Arrays as stored: `.npy` bytes whose header is checked before they are written.

`npy_bytes`: issue 46 found `.npy` files published unreadable (NeMo's NVRTC log had overwritten CPython's shared
`b" "`, which numpy pads headers with): bytes whose header does not parse back to the array's dtype and shape are
refused, never written.
"""

from __future__ import annotations

import io

import numpy as np


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
