"""Lever 3's check on a device: the same segments decoded with CUDA graphs on and off, the decoder's mode asserted
before and after each call. No Dagster.

`tests/test_gpu_device.py` (the `gpu` test: identical words across modes) and `benchmarks/gpu_decoder_check.py`
(the longer report: timings, tampering caught) both decode through `decode_in_mode`, so the two cannot drift.
"""

from __future__ import annotations

import pathlib
import time

import numpy as np
import soundfile as sf

from batch_assets.gpu.asr.transcribe import (
    Segment,
    apply_decoder_mode,
    check_decoder_mode,
    observe_decoder,
    transcribe_segments,
)

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")


def folder_audio(folder: pathlib.Path) -> dict[str, np.ndarray]:
    """{file stem: mono 16 kHz samples} for the folder's wav/flac/ogg files (any depth), in path order."""
    audio = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix in AUDIO_SUFFIXES:
            samples, rate = sf.read(path, dtype="float32", always_2d=True)
            if rate != 16000:
                raise ValueError(f"{path}: {rate} Hz; this check decodes 16 kHz audio only")
            audio[path.stem] = samples.mean(axis=1)
    return audio


def segments_of(audio: dict[str, np.ndarray], seconds: float) -> list[Segment]:
    """Each unit cut into `seconds`-long segments (the last one shorter; none under one second)."""
    out = []
    for uid, samples in audio.items():
        duration, start = len(samples) / 16000, 0.0
        while start < duration - 1.0:
            out.append(Segment(uid, start, min(duration, start + seconds)))
            start += seconds
    return out


def word_key(words) -> list[tuple]:
    return [(w.unit_id, w.start_s, w.end_s, w.word) for w in words]


def decode_in_mode(model, device, enabled: bool, audio: dict[str, np.ndarray], segments: list[Segment], batch: int,
                   settings):
    """(settings, words, info): the segments decoded with CUDA graphs `enabled`, the decoder's mode checked before
    and after (`DecoderModeError` when it is not the one asked for), the call timed with the device synchronized."""
    import torch

    settings = apply_decoder_mode(model, enabled, settings)
    before = check_decoder_mode(model, device, enabled, "before")
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    synchronize()
    started = time.perf_counter()
    words = transcribe_segments(model, audio, segments, batch)
    synchronize()
    seconds = time.perf_counter() - started
    after = check_decoder_mode(model, device, enabled, "after")
    return settings, words, {"enabled": enabled, "before": before, "after": after, "seconds": round(seconds, 3),
                             "words": len(words), "observed": observe_decoder(model, device).describe()}
