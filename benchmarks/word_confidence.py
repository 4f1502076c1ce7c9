"""What the words' `score` (the TDT decoder's word confidence) costs in ASR seconds; proof it changes nothing else.

The section asks NeMo for word confidence (`gpu/asr/transcribe.py`: `WORD_CONFIDENCE` in the decoding config) unless
`BATCH_ASSETS_WORD_CONFIDENCE=false`: the bar was a setting if it cost more than 3 % of ASR seconds. This bench
transcribes the same speech segments with it on and off (alternating, after a warm-up, medians), through the
section's own `apply_decoder_mode` and `transcribe_segments`, and checks that words and times are identical both ways.

    .venv/bin/python benchmarks/word_confidence.py                       # builtin tiny TDT on CPU, 2 threads
    .venv/bin/python benchmarks/word_confidence.py --asr-model nvidia/parakeet-tdt-0.6b-v2 --device cuda
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import soundfile as sf
import soxr
import torch

from batch_assets.gpu.asr.transcribe import Segment, apply_decoder_mode, transcribe_segments
from batch_assets.models.loaders import load_asr_model
from batch_assets.models.names import TINY_TDT
from batch_assets.storage.resource import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_data" / "audio" / "2026-01-15"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asr-model", default=TINY_TDT)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model = load_asr_model(args.asr_model, device)
    audio, segments = {}, []
    for path in sorted(SAMPLE.rglob("*.*")):
        signal, rate = sf.read(path, dtype="float32", always_2d=True)
        audio[path.name] = soxr.resample(signal.mean(axis=1), rate, 16_000).astype(np.float32)
        edges = np.arange(0.5, len(audio[path.name]) / 16_000 - 6, 6.0)
        segments.extend(Segment(path.name, float(a), float(a) + 6.0) for a in edges)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    words: dict[bool, list] = {}
    for enabled in (False, True):  # warm-up, and the words of each
        apply_decoder_mode(model, True, None, enabled)
        words[enabled] = transcribe_segments(model, audio, segments, args.batch_size)
    for repeat in range(args.repeats):
        for enabled in (False, True) if repeat % 2 == 0 else (True, False):
            apply_decoder_mode(model, True, None, enabled)
            started = time.perf_counter()
            transcribe_segments(model, audio, segments, args.batch_size)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds[enabled].append(time.perf_counter() - started)
    same = [(w.unit_id, w.start_s, w.end_s, w.word) for w in words[False]] == [
        (w.unit_id, w.start_s, w.end_s, w.word) for w in words[True]]
    off, on = statistics.median(seconds[False]), statistics.median(seconds[True])
    scores = [w.score for w in words[True]]
    print(json.dumps({
        "asr_model": args.asr_model, "device": str(device), "threads": args.threads, "segments": len(segments),
        "audio_s": round(sum(s.end_s - s.start_s for s in segments), 1), "words": len(words[True]),
        "asr_seconds_off": round(off, 4), "asr_seconds_on": round(on, 4),
        "cost_percent": round(100 * (on - off) / off, 2),
        "words_and_times_identical": same, "scores_none": sum(s is None for s in scores),
        "score_min": min((s for s in scores if s is not None), default=None), "runs_off": seconds[False],
        "runs_on": seconds[True],
    }, indent=1))
    assert same, "word confidence changed the words or their times"


if __name__ == "__main__":
    main()
