"""Two-channel calls read by channel against mixed and diarized: section seconds, audio-hours per section-hour and
accuracy, through the real assets.

    .venv/bin/python benchmarks/channels.py                                   # tiny models, CPU, ~1 min on 2 cores
    .venv/bin/python benchmarks/channels.py --models production-shaped        # the production architectures
    .venv/bin/python benchmarks/channels.py --device cuda --models production-shaped --json results/gpu_channels.json

A day of contact-centre calls is built from the sample's English dialogues (`long_units/long_audio.py:
two_channel_call`: each dialogue's first voice on channel 0, the others on channel 1, each reply starting 0.6 s
before the other party stops), every call written twice: a 16 kHz FLAC and an 8 kHz mu-law WAV with line echo (each
party at -26 dB on the other's channel). `fetched_audio` and
`prepared_flights` are materialized once; the GPU step (`gpu_section`, all exact levers on) once untimed (the
warm-up), then `--repeats` times each reading: `by channel` (the default, `channel_reading_enabled` on) and `mixed`
(off: mixed down and diarized). Printed per reading: wall and section seconds, each stage's seconds, audio-hours
(the calls' own length, not twice it) per section-hour, and per kind of file the share of words on their channel's
speaker and the words' similarity to the script (`long_audio.call_figures`); JSON with `--json`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import shutil
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PARTITION = "2026-04-01"
READINGS = {"by channel": True, "mixed": False}
ECHO = 0.05  # -26 dB


def build(folder: pathlib.Path, calls: int | None) -> dict:
    """Write the day's calls (the first `calls` dialogues; None: all); returns each unit's turns by unit id."""
    import soundfile as sf
    import soxr

    from batch_assets.long_units.long_audio import sample_dialogues, two_channel_call

    day, truth = folder / "source" / PARTITION, {}
    day.mkdir(parents=True)
    for i, dialogue in enumerate(sample_dialogues()[:calls]):
        samples, turns = two_channel_call([dialogue])
        sf.write(day / f"call_{i:02d}.flac", samples, 16_000, subtype="PCM_16")
        phone = samples + ECHO * samples[:, ::-1]  # line echo: each party faintly on the other's channel
        sf.write(day / f"phone_{i:02d}.wav", soxr.resample(phone, 16_000, 8000), 8000, subtype="ULAW")
        truth[f"call_{i:02d}.flac"] = truth[f"phone_{i:02d}.wav"] = turns
    return truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default="tiny", choices=["tiny", "production-shaped"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--calls", type=int, help="the first N sample dialogues (default: all 7)")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()

    import dagster as dg
    import numpy as np
    import polars as pl

    from batch_assets.definitions import all_assets
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.long_units.long_audio import call_figures
    from batch_assets.models.names import MODEL_PROFILES
    from batch_assets.orchestration.io_manager import StorageJsonIOManager
    from batch_assets.storage.resource import StorageResource

    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-channels-"))
    truth = build(work, args.calls)
    asr_model, diarization_pipeline = MODEL_PROFILES[args.models]
    gpu = GpuResource(device=args.device, lock_dir=str(work / "locks"), torch_threads=args.threads,
                      asr_model=asr_model, diarization_pipeline=diarization_pipeline)

    def resources(root: pathlib.Path) -> dict:
        storage = StorageResource(source_url=str(work / "source"), storage_url=str(root))
        return {"storage": storage, "gpu": gpu, "gpu_io": StorageJsonIOManager(storage=storage)}

    ingest = work / "ingest"
    assert dg.materialize(all_assets, selection=dg.AssetSelection.assets("fetched_audio", "prepared_flights"),
                          partition_key=PARTITION, resources=resources(ingest),
                          instance=dg.DagsterInstance.ephemeral()).success

    def run(enabled: bool, root: pathlib.Path) -> dict:
        for asset in ("fetched_audio", "prepared_flights"):
            shutil.copytree(ingest / asset, root / asset)
        started = time.perf_counter()
        result = dg.materialize(
            all_assets, selection=dg.AssetSelection.assets("vad_scores", "diarization", "transcripts"),
            partition_key=PARTITION, resources=resources(root), instance=dg.DagsterInstance.ephemeral(),
            run_config={"ops": {"gpu_section": {"config": {"channel_reading_enabled": enabled}}}})
        wall = time.perf_counter() - started
        assert result.success
        meta = next({k: v.value for k, v in e.materialization.metadata.items()}
                    for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "transcripts")
        storage = resources(root)["storage"]
        units = storage.read_parquet("transcripts", PARTITION, "units")
        words = storage.read_parquet("transcripts", PARTITION, "words")
        figures = {}
        for kind, suffix in (("16 kHz FLAC", ".flac"), ("8 kHz mu-law WAV", ".wav")):
            scored = [call_figures(words.filter(pl.col("unit_id") == uid).to_dicts(), turns)
                      for uid, turns in truth.items() if uid.endswith(suffix)]
            figures[kind] = {"words_on_their_channel": float(np.mean([s for s, _ in scored])),
                             "similarity": float(np.mean([s for _, s in scored]))}
        audio_s = float(units["duration_s"].sum())
        return {"wall_s": wall, "section_s": meta["section_seconds"], "stage_seconds": meta["stage_seconds"],
                "audio_s": audio_s, "audio_hours_per_section_hour": audio_s / meta["section_seconds"],
                "readings": units["channel_reading"].value_counts().sort("channel_reading").rows(),
                "figures": figures, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    started = time.perf_counter()
    run(True, work / "warm-up")
    print(f"warm-up (untimed) {time.perf_counter() - started:.1f} s; {len(truth)} calls, device {args.device}, "
          f"{args.threads} torch threads", flush=True)
    rows = []
    for repeat in range(args.repeats):
        for name, enabled in READINGS.items():
            row = run(enabled, work / f"run-{len(rows):02d}") | {"reading": name, "repeat": repeat}
            rows.append(row)
            stages = ", ".join(f"{k} {v['device'] + v['host']:.1f}" for k, v in row["stage_seconds"].items()
                               if v["device"] + v["host"] > 0.05)
            print(f"{name:10s} repeat {repeat}: wall {row['wall_s']:.1f} s, section {row['section_s']:.1f} s "
                  f"({stages}), {row['audio_hours_per_section_hour']:.1f} audio-h per section-h", flush=True)
            for kind, figure in row["figures"].items():
                print(f"    {kind}: {figure['words_on_their_channel']:.1%} of words on their channel's speaker, "
                      f"similarity {figure['similarity']:.2f}")
    by = {name: [r for r in rows if r["reading"] == name] for name in READINGS}
    speed = (np.mean([r["audio_hours_per_section_hour"] for r in by["by channel"]])
             / np.mean([r["audio_hours_per_section_hour"] for r in by["mixed"]]))
    print(f"by channel vs mixed: {speed:.2f}x audio-hours per section-hour")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": args.device, "models": args.models, "torch_threads": args.threads,
                                         "calls": len(truth),
                                         "by_channel_vs_mixed": speed, "runs": rows}, indent=2, default=str))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
