"""Process-wide settings that must be in place before NeMo or pyannote are imported."""

from __future__ import annotations

import logging
import os
import warnings


class _KnownNemoNoise(logging.Filter):
    """NeMo's warning that CUDA graphs need conditional nodes, when the reason is only that there is no CUDA (CPU)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("No conditional node support for Cuda" in message and "CUDA is not available" in message)


_NEMO_FILTER = _KnownNemoNoise()


def quiet_model_libraries() -> None:
    # pyannote 4 sends usage telemetry unless told not to; a batch pipeline never should.
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # We never let pyannote decode files (audio is handed over in memory), so torchcodec's state is moot.
    warnings.filterwarnings("ignore", message=r"(?s).*torchcodec is not installed correctly.*")
    # Known, not ours to fix: NeMo's own use of a deprecated omegaconf call, NeMo's CPU-only CUDA-graphs notice, and
    # OneLogger (NeMo's training telemetry, disabled) saying at import that it is disabled and has no exporters.
    warnings.filterwarnings("ignore", message=r"register_new_resolver\(\) is deprecated")
    if _NEMO_FILTER not in logging.getLogger("nemo_logger").filters:
        logging.getLogger("nemo_logger").addFilter(_NEMO_FILTER)
    for name in ("nv_one_logger.api.config", "nv_one_logger.training_telemetry.api.training_telemetry_provider"):
        logging.getLogger(name).setLevel(logging.ERROR)
