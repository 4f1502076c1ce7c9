"""NeMo's private reaches in one place: the NVRTC compile-log buffer of its CUDA-graph decoders.

Why: NeMo 3.0.0's `run_nvrtc` (`nemo/core/utils/cuda_python_utils.py`), which the TDT and RNNT label-looping
decoders (and the CTC and beam decoders) call to build their CUDA-graph kernels, hands NVRTC `b" " * size` to
write the compile log into. An empty log has size 1, and `b" " * 1` is CPython's shared one-byte `b" "`: NVRTC
writes its terminating NUL into it, and from then on every `b" " * n` in the process (numpy pads `.npy` headers
with it) is NULs. Every `.npy` saved after the first graph build is then unreadable. It shows wherever modules
run compiled from source (no `.pyc`: `PYTHONDONTWRITEBYTECODE`, `pip --no-compile`, read-only site-packages), as
on the first H200 run (issue 46).

`install_nvrtc_fix()` replaces `run_nvrtc` with `_run_nvrtc`, the same calls with buffers of their own (never
one byte, so never a shared object), in `cuda_python_utils` and in every loaded NeMo module that imported it by
name (`NVRTC_IMPORTERS`; later importers get it from `cuda_python_utils`). It replaces only the function it was
written against (`NEMO_RUN_NVRTC_SHA256`, its source); any other leaves NeMo as it is and says so, and
`tests/test_nvrtc_log.py` fails on the upgrade so that someone looks (NeMo may have fixed it upstream: then drop
this). Whatever happens here, `faults.check_interpreter` catches a damaged `b" "` before anything is committed.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import sys

NVRTC_MODULE = "nemo.core.utils.cuda_python_utils"
NEMO_VERSION = "3.0.0"
# sha256 of `inspect.getsource(run_nvrtc)` in NeMo 3.0.0: the function `_run_nvrtc` stands in for
NEMO_RUN_NVRTC_SHA256 = "98500fc57bd38d17ec1aaef247b7bd28fb3b33296376c0bbdf1d1947a2a3d15b"
# NeMo 3.0.0's modules that `from nemo.core.utils.cuda_python_utils import ... run_nvrtc`
NVRTC_IMPORTERS = (
    "nemo.collections.asr.parts.submodules.ctc_batched_beam_decoding",
    "nemo.collections.asr.parts.submodules.ctc_greedy_decoding",
    "nemo.collections.asr.parts.submodules.cuda_graph_rnnt_greedy_decoding",
    "nemo.collections.asr.parts.submodules.rnnt_malsd_batched_computer",
    "nemo.collections.asr.parts.submodules.tdt_malsd_batched_computer",
    "nemo.collections.asr.parts.submodules.transducer_decoding.rnnt_label_looping",
    "nemo.collections.asr.parts.submodules.transducer_decoding.tdt_label_looping",
)
_log = logging.getLogger(__name__)


class NemoChanged(RuntimeError):
    """NeMo's `run_nvrtc` is not the function this adapter was written against (moved, or its source changed)."""


def _run_nvrtc(kernel_string: str, kernel_name: bytes, program_name: bytes):
    """NeMo 3.0.0's `run_nvrtc` with buffers NVRTC may write into: `size + 1` bytes (at least two, so a new object,
    never CPython's shared one-byte `b" "`)."""
    nemo = sys.modules[NVRTC_MODULE]  # its `nvrtc`, `cuda` and `assert_drv`, looked up at call time
    nvrtc, cuda, check = nemo.nvrtc, nemo.cuda, nemo.assert_drv
    err, prog = nvrtc.nvrtcCreateProgram(str.encode(kernel_string), program_name, 0, [], [])
    check(err)
    (err,) = nvrtc.nvrtcCompileProgram(prog, 0, [])
    check(err)
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    check(err)
    log = b"\0" * (size + 1)
    (err,) = nvrtc.nvrtcGetProgramLog(prog, log)
    check(err)
    err, ptx_size = nvrtc.nvrtcGetPTXSize(prog)
    check(err)
    ptx = b"\0" * (ptx_size + 1)
    (err,) = nvrtc.nvrtcGetPTX(prog, ptx)
    check(err)
    import numpy as np

    ptx = np.char.array(ptx[:ptx_size])
    err, module = cuda.cuModuleLoadData(ptx.ctypes.data)
    check(err)
    err, kernel = cuda.cuModuleGetFunction(module, kernel_name)
    check(err)
    return kernel


_ORIGINAL: list = []  # NeMo's function, once `install_nvrtc_fix` replaced it


def nemo_run_nvrtc():
    """NeMo's own `run_nvrtc`, checked to be the one `_run_nvrtc` stands in for (`NemoChanged` otherwise)."""
    try:
        module = importlib.import_module(NVRTC_MODULE)
        original = module.run_nvrtc
    except (ImportError, AttributeError) as error:
        raise NemoChanged(f"{NVRTC_MODULE}.run_nvrtc is gone ({error}): NeMo moved it; check whether its NVRTC log "
                          "buffer is still the shared b' ' and update batch_assets/gpu/adapters/nemo_adapter.py"
                          ) from None
    if original is _run_nvrtc:
        original = _ORIGINAL[0]
    digest = hashlib.sha256(inspect.getsource(original).encode()).hexdigest()
    if digest != NEMO_RUN_NVRTC_SHA256:
        raise NemoChanged(f"{NVRTC_MODULE}.run_nvrtc changed since NeMo {NEMO_VERSION} (source sha256 {digest[:16]}…): "
                          "check whether it still writes its log into b' ' * size (fixed upstream: drop the adapter) "
                          "and update batch_assets/gpu/adapters/nemo_adapter.py")
    return original


def install_nvrtc_fix() -> list[str]:
    """Replace NeMo's `run_nvrtc` by `_run_nvrtc` wherever it is bound by name; returns the modules patched (none
    the second time). A NeMo whose `run_nvrtc` is not the known one is left alone, with a warning (the interpreter
    check still guards)."""
    try:
        original = nemo_run_nvrtc()
    except NemoChanged as error:
        _log.warning("NVRTC log fix not installed: %s", error)
        return []
    _ORIGINAL[:] = [original]
    patched = []
    for name, module in list(sys.modules.items()):
        if (name == NVRTC_MODULE or name.startswith("nemo.")) and getattr(module, "run_nvrtc", None) is original:
            module.run_nvrtc = _run_nvrtc
            patched.append(name)
    return patched
