"""Shared by the benchmark scripts: print a JSON report and write it where asked."""

from __future__ import annotations

import json
import pathlib


def cuda_peak_mib(torch, device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None


def emit(report: dict, out: pathlib.Path | None) -> None:
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
