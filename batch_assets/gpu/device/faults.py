"""Which errors are the device's, not the audio's: they fail the worker, never a unit.

An exception while one unit is processed is that unit's result (`failed`, with the reason) unless it says
the device, its driver or its collective communication is broken or out of memory: then every later
unit on this worker would fail the same way, and classing them `failed` would publish a broken GPU as
bad audio. Such an error is raised as `DeviceFault`; the GPU step quarantines its process (it refuses
further GPU work), keeps the flights already committed and fails, so that Dagster retries it in a fresh
process (a fresh pod on Kubernetes) that resumes from those commits.

How they are told apart (the error and every error it was raised from, `__cause__` / `__context__`):
- by type: `torch.OutOfMemoryError` (device memory), `torch.AcceleratorError` (what CUDA errors raise
  since torch 2.8), `torch.distributed.DistError` (NCCL and other collective backends);
- by message, for libraries that re-raise them as plain errors: "CUDA error", "CUBLAS_STATUS_",
  "CUDNN_STATUS_", "cuDNN error", "NCCL", "device-side assert", "illegal memory access", "an illegal
  instruction", "unspecified launch failure", "ECC error", "CUDA driver", "no CUDA-capable device",
  "out of memory" on a device ("CUDA out of memory", "HIP out of memory").
Everything else (a shape the model refuses, a value error on odd audio, host `MemoryError` on one huge
unit) stays the unit's own failure. One exception: a batched ASR call that runs out of device memory is
not yet a fault: the cache is freed and the flight's units are retried one by one (smaller calls); only
if one of those runs out too is it a `DeviceFault`.
"""

from __future__ import annotations

import re

_DEVICE_MESSAGE = re.compile(
    r"CUDA error|CUBLAS_STATUS_|CUDNN_STATUS_|cuDNN error|NCCL|device-side assert|illegal memory access"
    r"|an illegal instruction|unspecified launch failure|ECC error|CUDA driver|no CUDA-capable device"
    r"|(CUDA|HIP|XPU|MPS) out of memory|CUDA-capable device\(s\) is/are busy",
    re.IGNORECASE,
)


class DeviceFault(RuntimeError):
    """The device cannot be trusted any more; the worker is quarantined and the step retried elsewhere."""


def _device_types() -> tuple[type, ...]:
    import torch

    found: list[type] = [torch.OutOfMemoryError]
    found += [t for t in (getattr(torch, "AcceleratorError", None),) if t is not None]
    try:
        from torch.distributed import DistError

        found.append(DistError)
    except ImportError:  # a torch built without distributed
        pass
    return tuple(found)


def device_fault(error: BaseException) -> str | None:
    """Why `error` is the device's fault (a short description), or None when it may be the unit's."""
    types, seen = _device_types(), set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DeviceFault):
            return str(current)
        if isinstance(current, types) or _DEVICE_MESSAGE.search(str(current)):
            return f"{type(current).__name__}: {current}"[:500]
        current = current.__cause__ or current.__context__
    return None


def out_of_memory(error: BaseException) -> bool:
    """Whether `error` is the device running out of memory (recoverable by smaller work)."""
    import torch

    return isinstance(error, torch.OutOfMemoryError) or bool(re.search(r"(CUDA|HIP|XPU|MPS) out of memory", str(error)))


def free_device_cache(device) -> None:
    """Return the caching allocator's free blocks to the device (after an out-of-memory error)."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        torch.cuda.empty_cache()


def raise_if_device_fault(error: BaseException, where: str) -> None:
    """Raise `DeviceFault` (from `error`) when the error is the device's; return otherwise."""
    why = device_fault(error)
    if why is not None:
        raise DeviceFault(f"device fault in {where}: {why}") from error


def interpreter_damaged() -> bool:
    """Whether CPython's shared one-byte `b" "` (what `bytes([32])` returns) is no longer a space: something wrote
    into it (NeMo's NVRTC log, `gpu/adapters/nemo_adapter.py`), and every `b" " * n` made from it since is not
    spaces."""
    return bytes([32])[0] != 32


def check_interpreter(where: str) -> None:
    """`DeviceFault` when the shared `b" "` is damaged: what this process writes from now on (an `.npy` header's
    padding) cannot be trusted, so the step stops before committing and is retried in a fresh process."""
    if interpreter_damaged():
        raise DeviceFault(f"device fault {where}: CPython's shared b' ' was overwritten (NeMo's NVRTC log: "
                          "gpu/adapters/nemo_adapter.py); nothing more is written from this process")
