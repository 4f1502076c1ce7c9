"""What batch invariance costs ASR: NeMo's own decoder and normalization against the adapter's (issue 56).

A flight's worth of segments (the sample partition's speech cut into 3-30 s pieces, as `speech_segments` cuts a
flight), transcribed in the section's batches (`batch_size_for`: 8 on a CPU, 128 on CUDA), `--repeats` times each
way, alternating: with NeMo 3.0.0's own TDT decoder and per-feature normalization (whose batch companions move
word ends and scores) and with the adapter's (`gpu/adapters/nemo_adapter.py`: `install_batch_invariance`). Prints
each way's ASR seconds (the median), the ratio, and how
many of the flight's words differ between the two ways and between each way and the segments transcribed one at a
time (alone in its batch: no companions). Torch threads are set explicitly (`--threads`).

    .venv/bin/python benchmarks/asr_batches.py [--models tiny production-shaped] [--json out.json]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from report import emit  # noqa: E402

MODELS = {"tiny": "builtin:tiny-tdt", "production-shaped": "builtin:parakeet-tdt-0.6b-v2-shaped"}


def flight(seconds: float):
    """The sample partition's speech as one flight's audio and segments (3-30 s, in unit order)."""
    import numpy as np

    from batch_assets.gpu.asr.transcribe import Segment
    from batch_assets.long_units.long_audio import sample_audio_paths, sample_speech

    audio, segments, rng = {}, [], np.random.default_rng(56)
    for index, path in enumerate(sample_audio_paths(speech_only=True)):
        uid = f"u{index}"
        audio[uid] = sample_speech(path)
        cursor, length = 0.0, len(audio[uid]) / 16_000
        while cursor < length - 1.0:
            end = min(length, cursor + float(rng.uniform(3.0, 30.0)))
            segments.append(Segment(uid, round(cursor, 2), round(end, 2)))
            cursor = end
        if sum(s.end_s - s.start_s for s in segments) >= seconds:
            break
    return audio, segments


def differ(a: list, b: list) -> int:
    """How many words differ (any column), each list in unit time order."""
    key = lambda w: (w.unit_id, w.start_s, w.end_s)  # noqa: E731
    return sum(x != y for x, y in zip(sorted(a, key=key), sorted(b, key=key), strict=False)) + abs(len(a) - len(b))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seconds", type=float, default=240.0, help="audio seconds in the flight")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    import torch

    from batch_assets.gpu.adapters import nemo_adapter
    from batch_assets.gpu.asr.transcribe import apply_decoder_mode, batch_size_for, transcribe_segments
    from batch_assets.models.loaders import load_asr_model

    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    computer = nemo_adapter.nemo_tdt_computer()
    features, _ = nemo_adapter.nemo_normalize_batch()
    nemo_adapter.install_batch_invariance()
    ways = {"nemo": (computer._nemo_torch_impl, nemo_adapter._ORIGINAL_NORMALIZE[0]),
            "invariant": (nemo_adapter._stateful_torch_impl, nemo_adapter._per_row_normalize_batch)}
    audio, segments = flight(args.seconds)
    report = {"threads": args.threads, "device": "cpu", "segments": len(segments),
              "audio_s": round(sum(s.end_s - s.start_s for s in segments), 1), "models": {}}
    for profile in args.models:
        model = load_asr_model(MODELS[profile], device)
        apply_decoder_mode(model, False, None)
        batch = batch_size_for(device)
        seconds: dict[str, list[float]] = {way: [] for way in ways}
        words: dict[str, list] = {}
        for repeat in range(args.repeats + 1):  # the first round warms up, untimed
            for way, (impl, normalize) in ways.items():
                computer.torch_impl, features.normalize_batch = impl, normalize
                started = time.perf_counter()
                words[way] = transcribe_segments(model, audio, segments, batch)
                if repeat:
                    seconds[way].append(time.perf_counter() - started)
        alone = {}
        for way, (impl, normalize) in ways.items():
            computer.torch_impl, features.normalize_batch = impl, normalize
            alone[way] = [w for s in segments for w in transcribe_segments(model, audio, [s], batch)]
        computer.torch_impl, features.normalize_batch = ways["invariant"]
        median = {way: round(statistics.median(values), 3) for way, values in seconds.items()}
        report["models"][profile] = {
            "batch_size": batch, "asr_seconds_median": median, "asr_seconds": seconds,
            "invariant_over_nemo": round(median["invariant"] / median["nemo"], 3), "words": len(words["invariant"]),
            "words_differing_nemo_vs_invariant": differ(words["nemo"], words["invariant"]),
            "words_differing_batched_vs_alone": {way: differ(words[way], alone[way]) for way in ways}}
        print(f"{profile}: ASR {median['nemo']} s (NeMo's decoder) -> {median['invariant']} s (batch-invariant), "
              f"x{report['models'][profile]['invariant_over_nemo']}; words batched vs alone differ: "
              f"{report['models'][profile]['words_differing_batched_vs_alone']} of {len(words['invariant'])}",
              flush=True)
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
