"""NeMo's private reaches in one place: the NVRTC compile-log buffer of its CUDA-graph decoders, the token durations
and state rows of its TDT label-looping decoder, and its per-feature normalization's padded sums.

1. NVRTC log. NeMo 3.0.0's `run_nvrtc` (`nemo/core/utils/cuda_python_utils.py`), which its decoders call to build
their CUDA-graph kernels, hands NVRTC `b" " * size` for the compile log. An empty log has size 1, and `b" " * 1` is
CPython's shared one-byte `b" "`: NVRTC writes its NUL into it, and from then on every `b" " * n` in the process
(numpy's `.npy` header padding) is NULs, so every `.npy` saved after the first graph build is unreadable (wherever
modules run compiled from source: `PYTHONDONTWRITEBYTECODE`, `pip --no-compile`, read-only site-packages; the first
H200 run, issue 46). `install_nvrtc_fix()` replaces it with `_run_nvrtc` (buffers of its own, never one byte) in
`cuda_python_utils` and every loaded NeMo module that imported it by name (`NVRTC_IMPORTERS`; later importers get
it from there). Whatever happens here, `faults.check_interpreter` catches a damaged `b" "` before a commit.

2. Batch invariance (issue 56): a segment's words must not depend on which segments share its ASR batch. Two
NeMo 3.0.0 functions made them depend on it, measured on the builtin and production-shaped models:
- `GreedyBatchedTDTLabelLoopingComputer.torch_impl`, the decoder that runs on a CPU and on CUDA without graphs
  (lever 3 off), recomputes `durations` for the whole batch in its inner loop: a hypothesis that found its token in
  the first joint call, while a batch companion still searches, is stored with the duration predicted at the frame
  after it, so word ends moved by encoder frames. NeMo's stateful implementation (`cuda_graphs_impl`, the one its
  CUDA graphs capture) keeps each hypothesis's own duration; `torch_impl` now runs it in NeMo's own `no_graphs`
  mode (`_stateful_torch_impl`), so every decoder mode decodes with the same steps. That state (and the graphs
  captured for it) grows only with the largest batch the process has seen; in every mode it now has as many rows as
  the ASR batch size (`decoder_rows`, `_sized_cuda_graphs_impl`): a short last batch, and whatever ran before, do
  not change the row count of the decoder's GEMMs (graphs are recaptured only when the rows or the frames grow).
- `normalize_batch` (the preprocessor's `per_feature` normalization) sums each row's frames over the batch's padded
  length, zeros included, so the reduction, and a feature's last bits, change with the longest companion: a word's
  score moved in its fourth decimal. `_per_row_normalize_batch` reduces each row over a contiguous copy of its own
  frames. Given equal features the encoder's rows are bitwise equal whatever the batch (measured on CPU).
`install_batch_invariance()` installs the three, once per process (`gpu/asr/transcribe.py` calls it first).

Each replaces only the function it was written against (the `NEMO_*_SHA256` of their sources); any other, or a
source that cannot be read (NeMo installed without its `.py` files), leaves NeMo as it is and says so (a
result-moving fix left out is recorded in each commit the process makes, which is then never reused:
`absent_fixes`), and `tests/test_nvrtc_log.py` / `tests/test_batch_invariance.py` fail on the upgrade so that
someone looks (NeMo may have fixed it upstream: then drop the fix).
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
TDT_MODULE = "nemo.collections.asr.parts.submodules.transducer_decoding.tdt_label_looping"
TDT_COMPUTER = "GreedyBatchedTDTLabelLoopingComputer"
# sha256 of `inspect.getsource` in NeMo 3.0.0 of the computer's `torch_impl` (its inner loop overwrites a finished
# hypothesis's duration) and `cuda_graphs_impl` (its state, graphs captured for it, grows only with the largest batch)
NEMO_TDT_TORCH_IMPL_SHA256 = "fddc4e6255a84e332d4bd149a5db8e28c444e94f3f641bd50dfadaf7527ae9a9"
NEMO_TDT_CUDA_GRAPHS_IMPL_SHA256 = "6b455e8502d790954d9f2aa312fa9a8657c7d29570e61d9f85c2ca5196fb32a5"
FEATURES_MODULE = "nemo.collections.asr.parts.preprocessing.features"
# sha256 of `inspect.getsource(normalize_batch)` in NeMo 3.0.0: its per_feature statistics reduce over the padded length
NEMO_NORMALIZE_BATCH_SHA256 = "0d97645b6e6b6e22c276a21d24b834297b9214d6e4abada770697aa750f0a152"
NVRTC_IMPORTERS = (  # NeMo 3.0.0's modules that `from nemo.core.utils.cuda_python_utils import ... run_nvrtc`
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


def _require_source(function, where: str, expected: str, what_to_check: str) -> None:
    """`NemoChanged` unless `function`'s source has the sha256 the adapter was written against (the message says
    `what_to_check` before the fix is dropped or updated), or when it cannot be read (NeMo without its `.py` files)."""
    try:
        digest = hashlib.sha256(inspect.getsource(function).encode()).hexdigest()
    except (OSError, TypeError) as error:
        raise NemoChanged(f"cannot read the source of {where} ({type(error).__name__}: {error}): install NeMo with its "
                          "source files, or check by hand and update batch_assets/gpu/adapters/nemo_adapter.py"
                          ) from None
    if digest != expected:
        raise NemoChanged(f"{where} changed since NeMo {NEMO_VERSION} (source sha256 {digest[:16]}…): check whether "
                          f"{what_to_check} (fixed upstream: drop the fix) and update "
                          "batch_assets/gpu/adapters/nemo_adapter.py")


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
    _require_source(original, f"{NVRTC_MODULE}.run_nvrtc", NEMO_RUN_NVRTC_SHA256,
                    "it still writes its log into b' ' * size")
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


_DECODER_ROWS = [0]  # the rows the TDT decoder's state has: the section's ASR batch size (`decoder_rows`)


def decoder_rows(rows: int) -> None:
    """The TDT decoder's state rows from now on in this process: the ASR batch size, so that every batch (a short last
    one too, whatever ran before) runs its GEMMs over the same row count (another may sum in another order)."""
    _DECODER_ROWS[0] = rows


def _sized_cuda_graphs_impl(self, encoder_output, encoder_output_length, prev_batched_state=None,
                            multi_biasing_ids=None):
    """NeMo's `cuda_graphs_impl` (lever 3's graphs, and the eager `no_graphs` mode) over a state rebuilt (in a graphs
    mode: its graphs recaptured) unless it has `decoder_rows` rows (more for a larger batch), room for this batch's
    frames, this device, and the graphs its mode replays: the graph decoder's rows are the eager decoder's."""
    import torch

    rows, state = max(_DECODER_ROWS[0], encoder_output.shape[0]), self.state
    uncaptured = self.cuda_graphs_mode is not self.CudaGraphsMode.NO_GRAPHS and self.full_graph is None and (
        self.separate_graphs is None)
    if (state is None or uncaptured or state.batch_size != rows or state.max_time < encoder_output.shape[1]
            or state.device != encoder_output.device):
        width, dtype = self.joint.project_encoder(encoder_output[:1, :1]).shape[-1], next(self.joint.parameters()).dtype
        try:
            self._graph_reinitialize(torch.zeros((rows, encoder_output.shape[1], width), dtype=dtype,
                                                 device=encoder_output.device))
        except BaseException:
            self.reset_cuda_graphs_state()  # a capture cut short (out of memory): never replayed by the next call
            raise
        if self.cuda_graphs_mode is self.CudaGraphsMode.NO_GRAPHS:  # graphs of the state just replaced: gone
            self.full_graph = self.separate_graphs = None
    return self._nemo_cuda_graphs_impl(encoder_output=encoder_output, encoder_output_length=encoder_output_length,
                                       prev_batched_state=prev_batched_state, multi_biasing_ids=multi_biasing_ids)


def _stateful_torch_impl(self, encoder_output, encoder_output_length, prev_batched_state=None,
                         multi_biasing_ids=None):
    """`torch_impl` as NeMo's stateful implementation in its `no_graphs` mode: the steps its CUDA graphs capture,
    run eagerly, each hypothesis keeping its own token durations, over the state `_sized_cuda_graphs_impl` sizes."""
    mode = self.cuda_graphs_mode
    self.cuda_graphs_mode = self.CudaGraphsMode.NO_GRAPHS
    try:
        return self.cuda_graphs_impl(encoder_output=encoder_output, encoder_output_length=encoder_output_length,
                                     prev_batched_state=prev_batched_state, multi_biasing_ids=multi_biasing_ids)
    finally:
        self.cuda_graphs_mode = mode


def nemo_tdt_computer():
    """NeMo's TDT label-looping computer class, checked to be the one `_stateful_torch_impl` and
    `_sized_cuda_graphs_impl` were written for."""
    try:
        computer = getattr(importlib.import_module(TDT_MODULE), TDT_COMPUTER)
        original = computer.__dict__.get("_nemo_torch_impl", computer.torch_impl)
        graphs = computer.__dict__.get("_nemo_cuda_graphs_impl", computer.cuda_graphs_impl)
        computer.CudaGraphsMode.NO_GRAPHS, computer._graph_reinitialize  # noqa: B018 (what the fix runs)
    except (ImportError, AttributeError) as error:
        raise NemoChanged(f"{TDT_MODULE}.{TDT_COMPUTER} is not as in NeMo {NEMO_VERSION} ({error}): check whether its "
                          "torch_impl still overwrites a finished hypothesis's duration and its state still grows "
                          "only, and update batch_assets/gpu/adapters/nemo_adapter.py") from None
    _require_source(original, f"{TDT_COMPUTER}.torch_impl", NEMO_TDT_TORCH_IMPL_SHA256,
                    "its inner loop still overwrites `durations` for the whole batch")
    _require_source(graphs, f"{TDT_COMPUTER}.cuda_graphs_impl", NEMO_TDT_CUDA_GRAPHS_IMPL_SHA256,
                    "its state (and the graphs captured for it) still grows only with the largest batch")
    return computer


def _per_row_normalize_batch(x, seq_len, normalize_type):
    """NeMo's `normalize_batch`, its `per_feature` statistics reduced over a contiguous copy of each row's own frames,
    never over the batch's padded length (a row's bits whatever its companions' lengths); the other types NeMo's."""
    import torch

    if normalize_type != "per_feature":
        return _ORIGINAL_NORMALIZE[0](x, seq_len, normalize_type)
    lengths = [int(n) for n in seq_len.tolist()]
    if torch.cuda.is_available() and 1 in lengths:  # NeMo's own refusal, kept
        raise ValueError("normalize_batch with `per_feature` normalize_type received a tensor of length 1. This will "
                         "result in torch.std() returning nan. Make sure your audio length has enough samples for a "
                         "single feature (ex. at least `hop_length` for Mel Spectrograms).")
    constant = sys.modules[FEATURES_MODULE].CONSTANT
    normalized = torch.zeros_like(x)
    means = torch.zeros(x.shape[:2], dtype=x.dtype, device=x.device)
    stds = torch.full(x.shape[:2], constant, dtype=x.dtype, device=x.device)
    for row, n in enumerate(lengths):
        if n == 0:
            continue
        frames = x[row, :, :n].contiguous()
        mean = frames.sum(dim=1) / n
        centred = frames - mean.unsqueeze(1)
        std = torch.sqrt((centred**2).sum(dim=1) / (n - 1.0))
        std = std.masked_fill(std.isnan(), 0.0) + constant  # one frame: NeMo's edge case
        normalized[row, :, :n] = centred / std.unsqueeze(1)
        means[row], stds[row] = mean, std
    return normalized, means, stds


def nemo_normalize_batch():
    """NeMo's own `normalize_batch`, checked to be the one `_per_row_normalize_batch` stands in for."""
    try:
        module = importlib.import_module(FEATURES_MODULE)
        original = _ORIGINAL_NORMALIZE[0] if _ORIGINAL_NORMALIZE else module.normalize_batch
        module.CONSTANT  # noqa: B018 (what the replacement reads)
    except (ImportError, AttributeError) as error:
        raise NemoChanged(f"{FEATURES_MODULE}.normalize_batch is not as in NeMo {NEMO_VERSION} ({error}): check "
                          "whether its per_feature statistics still reduce over the padded length and update "
                          "batch_assets/gpu/adapters/nemo_adapter.py") from None
    _require_source(original, f"{FEATURES_MODULE}.normalize_batch", NEMO_NORMALIZE_BATCH_SHA256,
                    "its per_feature statistics still reduce over the batch's padded length")
    return module, original


_ORIGINAL_NORMALIZE: list = []
_INVARIANCE_TRIED: list[bool] = []  # once per process: the checks read NeMo's source
_ABSENT: list[str] = []  # the result-moving fixes this process could not install (`absent_fixes`)


def absent_fixes() -> tuple[str, ...]:
    """The fixes that move results (`install_batch_invariance`'s) that this process tried and could not install:
    each commit records them, and a commit that records one is never reused (`gpu/outputs/commit_identity.py`)."""
    return tuple(_ABSENT)


def install_batch_invariance() -> list[str]:
    """Once per process: the TDT decoder's `torch_impl` and `cuda_graphs_impl` (every instance) and the preprocessor's
    `normalize_batch` replaced (above). Returns what this call installed (none when tried before); a NeMo function
    that is not the known one is left as it is, with a warning."""
    if _INVARIANCE_TRIED:
        return []
    _INVARIANCE_TRIED.append(True)
    installed = []
    try:
        computer = nemo_tdt_computer()
        computer._nemo_torch_impl, computer._nemo_cuda_graphs_impl = computer.torch_impl, computer.cuda_graphs_impl
        computer.torch_impl, computer.cuda_graphs_impl = _stateful_torch_impl, _sized_cuda_graphs_impl
        installed.append("tdt token durations")
    except NemoChanged as error:
        _log.warning("TDT decoder fix not installed, batch companions may move word ends and scores: %s", error)
        _ABSENT.append("tdt token durations")
    try:
        module, original = nemo_normalize_batch()
        _ORIGINAL_NORMALIZE[:] = [original]
        module.normalize_batch = _per_row_normalize_batch
        installed.append("per-row feature normalization")
    except NemoChanged as error:
        _log.warning("per-row feature normalization not installed, batch companions may move scores: %s", error)
        _ABSENT.append("per-row feature normalization")
    return installed
