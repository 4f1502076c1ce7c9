"""Process-wide settings that must be in place before NeMo or pyannote are imported."""

from __future__ import annotations

import os
import warnings


def quiet_model_libraries() -> None:
    # pyannote 4 sends usage telemetry unless told not to; a batch pipeline never should.
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # We never let pyannote decode files (audio is handed over in memory), so torchcodec's state is moot.
    warnings.filterwarnings("ignore", message=r"(?s).*torchcodec is not installed correctly.*")
