"""The `run` command's flags: the variables they set (`RUN_SETTINGS`, `apply_run_settings`) and the run config
they ask for (`run_config_of`). Split from commands.py to keep modules small; commands.py imports them from here.
"""

from __future__ import annotations

import argparse
import os

from batch_assets.models.names import TINY_DIARIZATION, TINY_TDT
from batch_assets.settings import reload_settings

# `run` flags that set a variable the resources read (README: Configuration): flag, variable, default, what
RUN_SETTINGS = (
    ("--source", "BATCH_ASSETS_SOURCE_URL", "the bundled sample_data/audio",
     "root of the audio: a folder or s3://bucket/prefix"),
    ("--storage", "BATCH_ASSETS_STORAGE_URL", "storage/ in the checkout",
     "root of every output table and array: a folder or s3://..."),
    ("--asr-model", "BATCH_ASSETS_ASR_MODEL", TINY_TDT,
     f"the English NeMo TDT model: a name, a .nemo path or {TINY_TDT}"),
    ("--asr-models", "BATCH_ASSETS_ASR_MODELS", "builtin",
     "language -> ASR model: builtin, production, or en=MODEL,es=MODEL (docs/languages.md)"),
    ("--diarization-pipeline", "BATCH_ASSETS_DIARIZATION_PIPELINE", TINY_DIARIZATION,
     f"pyannote pipeline: a name, a folder or {TINY_DIARIZATION}"),
    ("--device", "BATCH_ASSETS_DEVICE", "auto", "auto, cpu, cuda or cuda:N"),
)


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def apply_run_settings(args: argparse.Namespace) -> None:
    """Each `run` flag given sets its variable, for the run's step processes, and this process reads them again."""
    for flag, variable, _, _ in RUN_SETTINGS:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None:
            os.environ[variable] = value
    reload_settings()


def run_config_of(allow_shrink: bool, allow_degrade: bool, units: list[str] | None = None,
                  hints: dict | None = None) -> dict | None:
    """The run config the flags ask for (`--allow-shrink`, `--allow-degrade`, `--units`, speaker hints and the
    language, `hints`), or None.
    A `units` rerun runs no ingest step, so the ingest guards' flags apply to the GPU section's alone."""
    ops: dict = {}
    for key, value in (({"units": units} if units else {}) | (hints or {})).items():
        ops.setdefault("gpu_section", {"config": {}})["config"][key] = value
    if allow_shrink and not units:
        ops.setdefault("fetched_audio", {"config": {}})["config"]["allow_shrink"] = True
    if allow_degrade:
        for op in ("gpu_section",) if units else ("fetched_audio", "prepared_flights", "gpu_section"):
            ops.setdefault(op, {"config": {}})["config"]["allow_degrade"] = True
    return {"ops": ops} if ops else None
