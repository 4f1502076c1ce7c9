"""Reduced precision (the `half_precision_enabled` switch, off by default): autocast for the ASR encoder and
the embedding trunk, where the device supports it; and each model's float32 matmul precision on CUDA
(`matmul_precision`: TF32 for the NeMo models with the `tf32_enabled` switch, full float32 otherwise).

Unlike the other levers this one changes numbers, so it is off unless a deployment turns it on, and the gate
(word edit rate, speaker agreement against full precision) decides whether it may stay on. Dtypes: bfloat16 for
the ASR encoder (its range; on CUDA where the device supports bf16, on CPUs with the AVX-512 bf16 or AMX
instructions), float16 for the embedding trunk on CUDA (a ResNet: cuDNN's fastest half type), bfloat16 on CPU.
Everything else (feature extraction, the TDT decoder and joint, statistics pooling and the embedding head,
segmentation, clustering) stays in float32: the encoder's and the trunk's outputs are cast back to float32.
The trunk is the shared trunk's `forward_frames` (lever 4); the stock embedding path stays float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def half_dtype(device, part: str):
    """The reduced dtype for `part` ("asr" or "embedding") on `device`, or None where it would not run there."""
    import torch

    kind = str(getattr(device, "type", device))
    if kind == "cuda":
        if part == "embedding":
            return torch.float16
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if kind == "cpu":
        return torch.bfloat16 if cpu_supports_bf16() else None
    return None


def cpu_supports_bf16() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


@contextlib.contextmanager
def autocast(device, enabled: bool, part: str) -> Iterator[None]:
    import torch

    dtype = half_dtype(device, part) if enabled else None
    if dtype is None:
        yield
        return
    with torch.autocast(str(getattr(device, "type", device)), dtype=dtype):
        yield


def describe(device, enabled: bool, tf32: bool = False) -> str:
    """What precision the section runs at, for the metadata ("float32", or which part runs at which dtype, and
    TF32 matmuls for the NeMo models where `tf32_enabled` and a CUDA device)."""
    if tf32 and str(getattr(device, "type", device)) == "cuda":
        return f"{describe(device, enabled)}; asr and language id matmuls tf32"
    if not enabled:
        return "float32"
    parts = {part: half_dtype(device, part) for part in ("asr", "embedding")}
    if not any(parts.values()):
        return "float32 (reduced precision unsupported on this device)"
    return ", ".join(f"{part} {str(dtype).removeprefix('torch.') if dtype else 'float32'}"
                     for part, dtype in parts.items())


@contextlib.contextmanager
def asr_encoder_autocast(model, device, enabled: bool) -> Iterator[None]:
    """The ASR encoder's forwards under autocast for the block (hooks, removed after), its outputs cast to float32."""
    import torch

    dtype = half_dtype(device, "asr") if enabled else None
    encoder = getattr(model, "encoder", None)
    if dtype is None or encoder is None:
        yield
        return
    contexts: list = []

    def before(_module, _args):
        context = torch.autocast(str(device.type), dtype=dtype)
        context.__enter__()
        contexts.append(context)

    def after(_module, _args, output):
        contexts.pop().__exit__(None, None, None)
        if isinstance(output, tuple):
            return tuple(o.float() if torch.is_tensor(o) and o.is_floating_point() else o for o in output)
        return output.float() if torch.is_tensor(output) and output.is_floating_point() else output

    handles = [encoder.register_forward_pre_hook(before), encoder.register_forward_hook(after)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        while contexts:
            contexts.pop().__exit__(None, None, None)


@contextlib.contextmanager
def matmul_precision(device, tf32: bool) -> Iterator[None]:
    """float32 matmuls and cuDNN convolutions on CUDA for the block: TF32 (`tf32_enabled`) or full float32, restored
    after. Set where each model runs, not once per section: pyannote turns TF32 off on every pipeline and inference
    call (`fix_reproducibility`), so a setting made at section start would not hold past the first diarization. On
    CPU there is no TF32: nothing to set."""
    import torch

    if str(getattr(device, "type", device)) != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
