"""A two-partition backfill: one run that loads the models once vs one run per partition (two loads).

Each variant runs `batch-assets run` in fresh processes, as the daemon's runs would (new interpreter,
imports, model load), on two copies of the sample partition, with the builtin models (their build cache
warmed first, as a deployment's would be). Prints wall seconds per variant and the model-load seconds
each run reported.

    .venv/bin/python benchmarks/backfill.py [--repeats 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import polars as pl

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "audio" / "2026-01-15"
PARTITIONS = ["2026-02-01", "2026-02-02"]


def _run(env: dict, *args: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _load_seconds(home: pathlib.Path) -> list[float]:
    """model_load_seconds from the instance's transcripts materializations (one value per run)."""
    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(home))
    records = instance.fetch_materializations(dg.AssetKey("transcripts"), limit=100).records
    per_run = {r.run_id: r.asset_materialization.metadata["model_load_seconds"].value for r in records}
    return sorted(per_run.values())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    for partition in PARTITIONS:
        shutil.copytree(SAMPLE, work / "source" / partition)
    base_env = dict(os.environ) | {
        "BATCH_ASSETS_SOURCE_URL": str(work / "source"), "HF_HUB_OFFLINE": "1", "PYANNOTE_METRICS_ENABLED": "false",
        "BATCH_ASSETS_MODEL_CACHE": str(work / "model-cache"), "BATCH_ASSETS_LOCK_DIR": str(work / "locks"),
    }
    rows = []
    for repeat in range(args.repeats):
        for variant in ("one run, one model load", "two runs, two model loads"):
            home = work / f"home-{repeat}-{len(rows)}"
            home.mkdir()
            env = base_env | {"DAGSTER_HOME": str(home), "BATCH_ASSETS_STORAGE_URL": str(work / f"storage-{len(rows)}")}
            if repeat == 0 and not rows:  # build the model cache and warm the disk cache, in an instance of its own
                (work / "home-warmup").mkdir()
                _run(env | {"BATCH_ASSETS_STORAGE_URL": str(work / "warmup"),
                            "DAGSTER_HOME": str(work / "home-warmup")}, "--partition", PARTITIONS[0])
            if variant.startswith("one"):
                wall = _run(env, "--partition", PARTITIONS[0], "--through", PARTITIONS[1])
            else:
                wall = sum(_run(env, "--partition", p) for p in PARTITIONS)
            loads = _load_seconds(home)
            rows.append({"variant": variant, "repeat": repeat, "wall_s": round(wall, 1), "model_loads": len(loads),
                         "model_load_s": [round(x, 1) for x in loads]})
            print(f"{variant:28s} rep {repeat}: {wall:6.1f} s wall, model loads {rows[-1]['model_load_s']}", flush=True)
    one = [r["wall_s"] for r in rows if r["variant"].startswith("one")]
    two = [r["wall_s"] for r in rows if r["variant"].startswith("two")]
    manifest = pl.read_parquet(work / "storage-0" / "fetched_audio" / PARTITIONS[0] / "manifest.parquet")
    summary = {"one_run_s": min(one), "two_runs_s": min(two), "saved_s": round(min(two) - min(one), 1), "rows": rows,
               "audio_s_per_partition": round(float(manifest["duration_s"].sum()), 1), "device": "cpu"}
    print(f"two-partition backfill: one run {min(one):.1f} s vs two runs {min(two):.1f} s (best of {args.repeats}); "
          f"saved {summary['saved_s']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
