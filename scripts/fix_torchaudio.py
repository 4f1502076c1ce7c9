"""Make torchaudio importable beside a CPU torch, without touching a GPU install.

PyPI's torchaudio 2.11.x wheels are CUDA builds. Beside the CPU torch wheel their native extension
libraries fail to load (they link CUDA runtime symbols), and both NeMo and pyannote.audio import
torchaudio at top level. They only use its pure-Python parts, so on a CPU torch we delete the native
libraries (only after proving they fail to load): torchaudio then imports as pure Python.
"""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

PROBE = "import torchaudio, torchaudio.functional; print(torchaudio.__version__)"


def _imports_cleanly() -> tuple[bool, str]:
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    return probe.returncode == 0 and "Error" not in probe.stderr, probe.stderr.strip()[-400:]


def main() -> int:
    import torch

    spec = importlib.util.find_spec("torchaudio")
    if spec is None or spec.origin is None:
        print("fix_torchaudio: torchaudio not installed, nothing to do")
        return 0
    if torch.version.cuda is not None:
        print(f"fix_torchaudio: CUDA torch {torch.__version__}: torchaudio left as installed")
        return 0
    root = pathlib.Path(spec.origin).parent
    native = sorted(p for p in root.rglob("*.so*") if p.is_file())
    ok, err = _imports_cleanly()
    if ok and not native:
        print("fix_torchaudio: torchaudio already pure Python")
        return 0
    if native:
        loads = subprocess.run(
            [sys.executable, "-c", "import ctypes, sys, torch\nfor p in sys.argv[1:]: ctypes.CDLL(p)",
             *map(str, native)],
            capture_output=True,
            text=True,
        )
        if loads.returncode == 0 and ok:
            print("fix_torchaudio: native torchaudio libraries load beside this torch: kept")
            return 0
        for path in native:
            path.unlink()
        print(f"fix_torchaudio: removed {len(native)} CUDA-linked native libraries from {root}")
    ok, err = _imports_cleanly()
    if not ok:
        print(f"fix_torchaudio: torchaudio still fails to import:\n{err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
