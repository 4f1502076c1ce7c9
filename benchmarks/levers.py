"""Bench the three levers through the real assets, and gate every run against the all-off run.

    .venv/bin/python benchmarks/levers.py --preset cpu        # ~11 audio-minutes; < 20 minutes on 2 CPU cores
    .venv/bin/python benchmarks/levers.py --preset gpu        # ~2 audio-hours, for a GPU machine

One process: the corpus is generated (real speech cut from the sample partition into units of varied
lengths, some silent), `fetched_audio` and `prepared_flights` are materialized once, then the GPU step
(`gpu_section`, the same code the UI runs) is materialized for every variant, twice: all levers off,
each lever alone, all on. Every flight load waits a simulated storage latency per unit (default 0.43 s,
the production figure). Prints the table and writes JSON (`--json`).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
import soundfile as sf

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
PARTITION = "2026-04-01"
PRESETS = {
    "cpu": {"units": 12, "min_s": 20.0, "max_s": 90.0, "silent_share": 0.15},
    "gpu": {"units": 120, "min_s": 20.0, "max_s": 100.0, "silent_share": 0.1},
}
LEVERS = ("prepare_flight_enabled", "vad_segmentation_reuse_enabled", "asr_cuda_graphs_enabled")
VARIANTS = {
    "all off": (False, False, False),
    "prepare flights": (True, False, False),
    "reuse segmentation": (False, True, False),
    "cuda graphs": (False, False, True),
    "all on": (True, True, True),
}


def generate(folder: pathlib.Path, units: int, min_s: float, max_s: float, silent_share: float, seed: int) -> float:
    from batch_assets.audio.decode import to_target

    rng = np.random.default_rng(seed)
    speech = []
    for path in sorted((REPO / "sample_data" / "audio").rglob("*")):
        if path.is_file() and "silence" not in path.parts:
            samples, rate = sf.read(path, dtype="float32", always_2d=True)
            speech.append(to_target(samples, rate))
    source = np.concatenate(speech)
    folder.mkdir(parents=True, exist_ok=True)
    total = 0.0
    for i in range(units):
        seconds = float(rng.uniform(min_s, max_s))
        n = int(seconds * 16000)
        if rng.random() < silent_share:
            audio = rng.normal(0, 0.002, n).astype(np.float32)
        else:
            start = int(rng.integers(0, len(source) - n)) if len(source) > n else 0
            audio = np.resize(source[start:], n)
        sf.write(folder / f"unit_{i:03d}.wav", audio, 16000, subtype="PCM_16")
        total += seconds
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    parser.add_argument("--units", type=int)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--latency", type=float, default=0.43, help="simulated storage latency per unit fetch (s)")
    parser.add_argument("--budget", type=float, default=1800.0, help="decode budget per flight (audio s)")
    parser.add_argument("--flight-units", type=int, default=8, help="most units per flight")
    parser.add_argument("--prepare-workers", type=int, default=1, help="flights prepared concurrently")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import dagster as dg

    from batch_assets.definitions import all_assets
    from batch_assets.gate.compare import gate
    from batch_assets.gpu.resources import GpuResource
    from batch_assets.io_manager import StorageJsonIOManager
    from batch_assets.storage import StorageResource

    preset = PRESETS[args.preset] | ({"units": args.units} if args.units else {})
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-levers-"))
    audio_s = generate(work / "source" / PARTITION, preset["units"], preset["min_s"], preset["max_s"], preset["silent_share"], args.seed)
    print(f"corpus: {preset['units']} units, {audio_s / 3600:.3f} audio-hours", flush=True)
    gpu = GpuResource(device=args.device, lock_dir=str(work / "locks"))

    def storage_at(root: pathlib.Path) -> StorageResource:
        return StorageResource(source_url=str(work / "source"), storage_url=str(root), simulated_latency_per_unit_s=args.latency)

    ingest_root = work / "ingest"
    started = time.perf_counter()
    ingest = dg.materialize(all_assets, selection=dg.AssetSelection.assets("fetched_audio", "prepared_flights"), partition_key=PARTITION,
                            resources={"storage": storage_at(ingest_root), "gpu": gpu, "gpu_io": StorageJsonIOManager(storage=storage_at(ingest_root))},
                            instance=dg.DagsterInstance.ephemeral(),
                            run_config={"ops": {"prepared_flights": {"config": {"decode_budget_seconds": args.budget,
                                                                               "max_units_per_flight": args.flight_units}}}})
    assert ingest.success
    ingest_s = time.perf_counter() - started
    load_started = time.perf_counter()
    models = gpu.models  # loaded once for the whole bench, as in a long-lived worker
    load_s = time.perf_counter() - load_started

    rows, baseline = [], None
    for repeat in range(args.repeats):
        for name, switches in VARIANTS.items():
            root = work / f"run-{len(rows):02d}"
            for asset in ("fetched_audio", "prepared_flights"):
                shutil.copytree(ingest_root / asset, root / asset)
            config = dict(zip(LEVERS, switches, strict=True)) | {"decode_budget_seconds": args.budget,
                                                                  "prepare_workers": args.prepare_workers}
            storage = storage_at(root)
            started = time.perf_counter()
            result = dg.materialize(all_assets, selection=dg.AssetSelection.assets("vad_scores", "diarization", "transcripts"), partition_key=PARTITION,
                                    resources={"storage": storage, "gpu": gpu, "gpu_io": StorageJsonIOManager(storage=storage)},
                                    instance=dg.DagsterInstance.ephemeral(),
                                    run_config={"ops": {"gpu_section": {"config": config}}})
            wall = time.perf_counter() - started
            assert result.success
            meta = next({k: v.value for k, v in e.materialization.metadata.items()}
                        for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "transcripts")
            if baseline is None:
                baseline = storage
            verdict = gate(baseline, storage, [PARTITION])
            rows.append({
                "variant": name, "repeat": repeat, "switches": config, "wall_s": wall,
                "audio_hours_per_compute_hour": (audio_s / 3600) / (wall / 3600),
                "section_s": meta["section_seconds"], "asr_s": meta["asr_seconds"], "diarization_s": meta["diarization_seconds"],
                "vad_s": meta["vad_seconds"], "flight_load_wait_s": meta["flight_load_wait_seconds"],
                "segmentation_forwards": meta["segmentation_forwards"], "decoder_modes": meta["decoder_modes"],
                "peak_memory": (f"{meta['cuda_peak_memory_gib']:.2f} GiB CUDA" if "cuda_peak_memory_gib" in meta
                                else f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB RSS"),
                "gate": verdict.as_dict(),
            })
            print(f"{name:20s} repeat {repeat}: {wall:6.1f} s wall, gate {'PASS' if verdict.passed else 'FAIL'}", flush=True)
    del models

    print()
    print(f"{'variant':20s} {'rep':>3s} {'audio-h/compute-h':>18s} {'section s':>10s} {'ASR s':>7s} {'diar s':>7s} "
          f"{'load wait s':>11s} {'seg fwd':>8s} {'peak memory':>16s} {'WER vs off':>10s} {'spk agree':>9s} {'gate':>5s}")
    for r in rows:
        g = r["gate"]
        print(f"{r['variant']:20s} {r['repeat']:>3d} {r['audio_hours_per_compute_hour']:>18.1f} {r['section_s']:>10.1f} "
              f"{r['asr_s']:>7.1f} {r['diarization_s']:>7.1f} {r['flight_load_wait_s']:>11.1f} {r['segmentation_forwards']:>8d} "
              f"{r['peak_memory']:>16s} {g['word_edit_rate']:>10.4f} {g['speaker_agreement']:>9.3f} {'PASS' if g['passed'] else 'FAIL':>5s}")
    mean = {name: np.mean([r["audio_hours_per_compute_hour"] for r in rows if r["variant"] == name]) for name in VARIANTS}
    speedup = mean["all on"] / mean["all off"]
    print(f"\nall on vs all off: {speedup:.2f}x audio-hours per compute-hour "
          f"(ingest {ingest_s:.1f} s once, model load {load_s:.1f} s once, device {gpu.models.device})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"preset": args.preset, "audio_hours": audio_s / 3600, "latency_per_unit_s": args.latency,
                                         "ingest_s": ingest_s, "model_load_s": load_s, "speedup_all_on_vs_off": speedup,
                                         "runs": rows}, indent=2, default=str))


if __name__ == "__main__":
    main()
