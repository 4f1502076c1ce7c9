"""The three speed levers as kill switches.

Each lever is on by default. Its default can be flipped for a whole deployment with an environment
variable, read once when the code location loads (so every run launched from that location agrees),
and each run can still override it in run config from the launchpad. A value other than
"true"/"false" stops the code location from loading with an error naming the variable: a typo in a
deployment must never silently turn a lever on or off.
"""

from __future__ import annotations

from collections.abc import Mapping

from batch_assets.settings import env_bool

SWITCH_ENV_VARS: dict[str, str] = {
    "prepare_flight_enabled": "BATCH_PIPELINE_PREPARE_FLIGHT_ENABLED",
    "vad_segmentation_reuse_enabled": "BATCH_PIPELINE_VAD_SEGMENTATION_REUSE_ENABLED",
    "asr_cuda_graphs_enabled": "BATCH_PIPELINE_ASR_CUDA_GRAPHS_ENABLED",
}


def read_switch_defaults(environ: Mapping[str, str] | None = None) -> dict[str, bool]:
    """Unset or empty means on; "true"/"false" (any case); anything else is a `SettingError` naming the variable."""
    return {name: env_bool(var, True, environ) for name, var in SWITCH_ENV_VARS.items()}


# Read once, at code-location load.
SWITCH_DEFAULTS: dict[str, bool] = read_switch_defaults()
