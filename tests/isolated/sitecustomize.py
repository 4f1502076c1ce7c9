"""Test-only: each Python process started with this folder on PYTHONPATH gets its own empty temp dir, HOME,
cache home and section-lock dir, as each step pod has on Kubernetes.

The deployed-configuration tests (tests/test_deployed.py) put this folder on the PYTHONPATH of the run they
launch; Dagster's multiprocess executor spawns one fresh interpreter per step, so every step process runs
this at start-up. Anything a step leaves on a local path for a later step (instead of in the storage) is then
missing there, and the test fails. Folders are made under BATCH_ASSETS_TEST_PROCESS_ROOT, one per process.
When the process exits it writes `imported.json` there: which model libraries it had imported (a CPU step, as
the assembly, must import none; the test finds a step's folder by the pid of its STEP_START event).
"""

import atexit
import json
import os
import sys
import tempfile

MODEL_LIBRARIES = ("nemo", "pyannote.audio", "torch")

_root = os.environ.get("BATCH_ASSETS_TEST_PROCESS_ROOT")
if _root:
    _mine = tempfile.mkdtemp(prefix=f"process-{os.getpid()}-", dir=_root)
    for _name, _variables in (("tmp", ("TMPDIR",)), ("home", ("HOME",)), ("cache", ("XDG_CACHE_HOME",)),
                              ("locks", ("BATCH_ASSETS_LOCK_DIR",))):
        os.makedirs(os.path.join(_mine, _name))
        for _variable in _variables:
            os.environ[_variable] = os.path.join(_mine, _name)
    tempfile.tempdir = None  # recomputed from TMPDIR

    def _record_imports(folder: str = _mine) -> None:
        with open(os.path.join(folder, "imported.json"), "w") as out:
            json.dump({"pid": os.getpid(), "model_libraries": [m for m in MODEL_LIBRARIES if m in sys.modules]}, out)

    atexit.register(_record_imports)
