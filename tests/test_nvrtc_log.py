"""NeMo's NVRTC compile log and CPython's shared `b" "` (issue 46): the damage reproduced on CPU, and each guard.

NeMo 3.0.0's `run_nvrtc` hands NVRTC `b" " * size` for the compile log; an empty log has size 1, so NVRTC writes
its NUL into the interpreter's shared one-byte `b" "` wherever modules run compiled from source. Here a subprocess
runs with an empty bytecode cache prefix and `-B` (every module compiled from source, nothing written) and calls
NeMo's real `run_nvrtc` with NVRTC and the driver replaced by stand-ins making the same calls' results and NVRTC's
one-byte write; no GPU is needed for the damage. That every NeMo module binding `run_nvrtc` by name (the TDT
decoder's `tdt_label_looping` among them) gets the adapter's is checked in this process.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from batch_assets.storage.resource import REPO_ROOT

SCRIPT = r'''
import ctypes, io, json, sys, tempfile
import numpy as np
import nemo.core.utils.cuda_python_utils as cpu
from batch_assets.gpu.adapters import nemo_adapter
from batch_assets.gpu.device.faults import DeviceFault, check_interpreter, interpreter_damaged
from batch_assets.storage.arrays import UnreadableArray
from batch_assets.storage.resource import StorageResource


class Nvrtc:  # NVRTC's answers to run_nvrtc's calls; an empty compile log is one byte, NVRTC writes its NUL there
    def nvrtcCreateProgram(self, *args): return 0, "program"
    def nvrtcCompileProgram(self, *args): return (0,)
    def nvrtcGetProgramLogSize(self, program): return 0, 1
    def nvrtcGetProgramLog(self, program, log):
        ctypes.memmove(ctypes.c_char_p(log), b"\0", 1)
        return (0,)
    def nvrtcGetPTXSize(self, program): return 0, 4
    def nvrtcGetPTX(self, program, ptx):
        ctypes.memmove(ctypes.c_char_p(ptx), b"ptx\0", 4)
        return (0,)


class Driver:
    def cuModuleLoadData(self, data): return 0, "module"
    def cuModuleGetFunction(self, module, name): return 0, name


cpu.nvrtc, cpu.cuda, cpu.assert_drv = Nvrtc(), Driver(), lambda err: None
array = np.arange(79 * 589 * 3, dtype=np.float32).reshape(79, 589, 3)  # the H200's unreadable array's shape


def observe(label):
    storage = StorageResource(storage_url=tempfile.mkdtemp())
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    try:
        np.load(io.BytesIO(buffer.getvalue()))
        saved = "loads"
    except Exception as error:
        saved = type(error).__name__
    try:
        check_interpreter("in the test")
        checked = "passed"
    except DeviceFault:
        checked = "DeviceFault"
    try:
        storage.write_array(array, "vad_scores", "2026-01-15", "unit_000")
        written = "written"
    except UnreadableArray:
        written = "UnreadableArray"
    return {"damaged": interpreter_damaged(), "np.save": saved, "check_interpreter": checked,
            "write_array": written, "header": buffer.getvalue()[90:128].hex()}


report = {}
original = cpu.run_nvrtc
report["patched"] = nemo_adapter.install_nvrtc_fix()
assert cpu.run_nvrtc is nemo_adapter._run_nvrtc
report["kernel"] = cpu.run_nvrtc("kernel", b"outer_label_looping_conditional", b"program.cu").decode()
report["fixed"] = observe("fixed")
cpu.run_nvrtc = original  # NeMo's own, as without the adapter
original("kernel", b"outer_label_looping_conditional", b"program.cu")
report["nemo"] = observe("nemo")
print("REPORT " + json.dumps(report))
'''


@pytest.mark.slow
def test_nemos_nvrtc_log_damages_the_shared_space_and_every_guard_catches_it(tmp_path):
    """Compiled from source, NeMo's `run_nvrtc` leaves `b" "` a NUL: `np.save` then writes a header numpy cannot
    parse (the H200's bytes: NUL alignment padding), the interpreter check raises `DeviceFault` and `write_array`
    refuses to write. With the adapter's `run_nvrtc` (installed first) nothing is damaged and every guard passes."""
    env = os.environ | {"PYTHONPYCACHEPREFIX": str(tmp_path / "no-bytecode"), "PYTHONDONTWRITEBYTECODE": "1",
                        "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-B", "-W", "ignore", "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    line = next((x for x in done.stdout.splitlines() if x.startswith("REPORT ")), None)
    assert line, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(line.removeprefix("REPORT "))
    assert report["kernel"] == "outer_label_looping_conditional"
    assert "nemo.core.utils.cuda_python_utils" in report["patched"]
    assert report["fixed"] | {"header": ""} == {"damaged": False, "np.save": "loads", "check_interpreter": "passed",
                                                "write_array": "written", "header": ""}
    assert report["nemo"] | {"header": ""} == {"damaged": True, "np.save": "ValueError",
                                               "check_interpreter": "DeviceFault", "write_array": "UnreadableArray",
                                               "header": ""}
    damaged = bytes.fromhex(report["nemo"]["header"])  # offsets 90-127: spaces, then NULs where np.save pads
    assert damaged[:4] == b"    " and set(damaged[4:-1]) == {0} and damaged[-1:] == b"\n"
    evidence = REPO_ROOT.parent / "shared" / "evidence" / "h200-cuda-graphs-vad-scores-unit_000.npy"
    if evidence.exists():  # the H200's own file: the same header bytes
        assert evidence.read_bytes()[90:128] == damaged


def _importers_of_run_nvrtc(root: pathlib.Path) -> set[str]:
    """NeMo's modules that import `run_nvrtc` by name, read from its source."""
    found = set()
    for path in root.rglob("*.py"):
        text = path.read_text(errors="replace")
        if "run_nvrtc" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and any(a.name == "run_nvrtc" for a in node.names):
                found.add(".".join(path.relative_to(root.parent).with_suffix("").parts))
    return found


def test_the_adapter_knows_nemos_run_nvrtc_and_every_module_that_imports_it():
    """Fails on a NeMo upgrade that moves or changes `run_nvrtc` or imports it somewhere new: look whether the log
    buffer is still the shared `b" "` (fixed upstream: drop the adapter), then update `gpu/adapters/nemo_adapter.py`."""
    import importlib

    import nemo

    from batch_assets.gpu.adapters import nemo_adapter

    assert nemo.__version__ == nemo_adapter.NEMO_VERSION, "NeMo upgraded: check gpu/adapters/nemo_adapter.py"
    nemo_adapter.nemo_run_nvrtc()  # NemoChanged when its source differs
    root = pathlib.Path(nemo.__file__).parent
    assert _importers_of_run_nvrtc(root) == set(nemo_adapter.NVRTC_IMPORTERS)
    for name in nemo_adapter.NVRTC_IMPORTERS:
        importlib.import_module(name)
    nemo_adapter.install_nvrtc_fix()
    for name in (nemo_adapter.NVRTC_MODULE, *nemo_adapter.NVRTC_IMPORTERS):
        assert sys.modules[name].run_nvrtc is nemo_adapter._run_nvrtc, name
    assert nemo_adapter.install_nvrtc_fix() == []  # once is enough


def test_write_array_checks_its_bytes_load_back(tmp_path):
    from batch_assets.storage.arrays import npy_bytes
    from batch_assets.storage.resource import StorageResource

    storage = StorageResource(storage_url=str(tmp_path))
    array = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    url = storage.write_array(array, "vad_scores", "2026-01-15", "unit")
    assert np.array_equal(storage.read_array(url), array)
    assert npy_bytes(array, url) == pathlib.Path(url).read_bytes()


@pytest.mark.slow
def test_a_damaged_space_stops_the_section_before_anything_is_committed(tmp_path):
    """NeMo's ASR call leaves `b" "` damaged (as its first CUDA-graph build did on the H200): the section raises
    `DeviceFault` (the GPU step quarantines its worker and is retried in a fresh process), and no flight of the run
    is committed, the damaged flight included. In this process, repaired after: modules loaded from `.pyc` hold
    `b" "` constants of their own, so only the shared object is damaged meanwhile."""
    import ctypes

    import soundfile as sf

    from batch_assets.gpu.device.faults import DeviceFault, interpreter_damaged
    from batch_assets.gpu.section.flight import SectionUnit
    from batch_assets.gpu.section.levers import Levers
    from batch_assets.gpu.section.runner import FlightWork, run_section
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.long_units.long_audio import sample_audio_paths
    from batch_assets.source.pieces import FlightAudio

    samples, rate = sf.read(sample_audio_paths(speech_only=True)[0], dtype="float32")
    audio = samples[: 12 * rate]
    models = GpuResource(device="cpu", lock_dir=str(tmp_path)).models
    transcribe = models.asr.transcribe

    def transcribe_then_damage(*args, **kwargs):  # what NeMo's first CUDA-graph build did on the H200
        hypotheses = transcribe(*args, **kwargs)
        ctypes.memmove(ctypes.c_char_p(bytes([32])), b"\0", 1)
        return hypotheses

    committed: list[str] = []
    work = [FlightWork(f, 12.0, [SectionUnit(f"{f}-unit", 0, len(audio))]) for f in ("flight-0000", "flight-0001")]
    models.asr.transcribe = transcribe_then_damage
    try:
        with pytest.raises(DeviceFault, match="CPython's shared b' ' was overwritten"):
            run_section(models, work, Levers(), load=lambda f: FlightAudio(f, audio, {}),
                        commit=lambda f, outcomes: committed.append(f))
        assert interpreter_damaged()
    finally:
        ctypes.memmove(ctypes.c_char_p(bytes([32])), b"  ", 1)  # two spaces: not the shared object itself
        models.asr.transcribe = transcribe
    assert committed == [] and not interpreter_damaged()
