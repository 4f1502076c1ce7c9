"""Production-scale GPU work on this machine: partition size vs GPU-step memory, and a kill ~60% in.

For each size (copies of the sample partition's units, tiled to 1 and 4 audio-hours) it runs the job
`transcribe_partition` as `batch-assets run` does (one process per step, a fresh instance), with flights
of `--budget` audio seconds and one shard, and prints wall seconds, the GPU step's peak RSS (the step
process's own `ru_maxrss`, reported in the shard report) and section seconds. Then, on the smaller
partition, it kills the run (SIGKILL to every process of the run) once ~60% of the flights are committed,
marks the run failed as run monitoring would, re-executes it from failure, and prints the time to finish
against the uninterrupted run and against starting over.

    .venv/bin/python benchmarks/shards.py [--hours 1 4] [--budget 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "audio" / "2026-01-15"
PARTITION = "2026-02-01"
DRIVER = textwrap.dedent("""
    import json, sys
    import dagster as dg
    from batch_assets.cli.commands import transcribe_partition_job
    instance = dg.DagsterInstance.get()
    run_config = json.loads(sys.argv[2])
    if len(sys.argv) > 3:  # re-execute a failed run from failure
        parent = instance.get_run_by_id(sys.argv[3])
        result = dg.execute_job(dg.reconstructable(transcribe_partition_job), instance=instance, tags=parent.tags,
                                reexecution_options=dg.ReexecutionOptions.from_failure(parent.run_id, instance))
    else:
        result = dg.execute_job(dg.reconstructable(transcribe_partition_job), instance=instance,
                                tags={"dagster/partition": sys.argv[1]}, run_config=run_config)
    sys.exit(0 if result.success else 1)
""")


def make_partition(root: pathlib.Path, hours: float) -> float:
    """Tile the sample's units (silence excluded) into `hours` of audio; returns the audio seconds."""
    import soundfile as sf

    from batch_assets.long_units.long_audio import sample_audio_paths

    units = [p for p in sample_audio_paths(speech_only=True) if SAMPLE in p.parents]
    durations = {p: sf.info(str(p)).duration for p in units}
    total, copy = 0.0, 0
    while total < hours * 3600:
        for unit in units:
            target = root / PARTITION / f"copy-{copy:03d}" / unit.relative_to(SAMPLE)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(unit, target)
            total += durations[unit]
        copy += 1
    return total


def environment(work: pathlib.Path, source: pathlib.Path) -> dict:
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return os.environ | {"DAGSTER_HOME": str(home), "BATCH_ASSETS_SOURCE_URL": str(source),
                         "BATCH_ASSETS_STORAGE_URL": str(work / "storage"),
                         "BATCH_ASSETS_LOCK_DIR": str(work / "locks"),
                         "BATCH_ASSETS_DEVICE": "cpu", "BATCH_ASSETS_TORCH_THREADS": "2", "PYTHONWARNINGS": "ignore"}


def transcripts_metadata(env: dict) -> dict:
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("transcripts"))
        return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def run_job(env: dict, config: dict, *extra: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", DRIVER, PARTITION, json.dumps(config), *extra], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def kill_and_resume(env: dict, config: dict, flights: int, share: float = 0.6) -> dict:
    import dagster as dg

    work = pathlib.Path(env["BATCH_ASSETS_STORAGE_URL"]) / "gpu_work" / PARTITION
    started = time.perf_counter()
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, PARTITION, json.dumps(config)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while len(list(work.glob("*/*.commit.json"))) < share * flights:
        if driver.poll() is not None:
            raise RuntimeError("the run finished before the kill")
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    killed_at = time.perf_counter() - started
    committed = len(list(work.glob("*/*.commit.json")))
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        [dead] = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.STARTED]
        instance.report_run_failed(dead)
        instance.event_log_storage.free_concurrency_slots_for_run(dead.run_id)
    resume_s = run_job(env, config, dead.run_id)
    meta = transcripts_metadata(env)
    return {"killed_after_s": round(killed_at, 1), "committed_at_kill": committed, "flights": flights,
            "resume_s": round(resume_s, 1), "total_s": round(killed_at + resume_s, 1),
            "resumed_flights": meta["resumed_flights"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--budget", type=float, default=300.0, help="audio seconds per flight")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    config = {"ops": {"prepared_flights": {"config": {"decode_budget_seconds": args.budget}},
                      "gpu_section": {"config": {"shard_audio_seconds": 10**6}}}}
    results = {"budget_s": args.budget, "sizes": [], "kill": None}
    with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
        for hours in args.hours:
            work = pathlib.Path(tmp) / f"{hours:g}h"
            audio_s = make_partition(work / "source", hours)
            env = environment(work, work / "source")
            wall = run_job(env, config)
            meta = transcripts_metadata(env)
            row = {"hours": hours, "audio_s": round(audio_s, 1), "units": meta["units"], "wall_s": round(wall, 1),
                   "section_s": meta["section_seconds"], "gpu_step_peak_rss_mib": meta["gpu_step_peak_rss_mib"],
                   "model_load_s": meta["model_load_seconds"],
                   "flights": int(meta["shard_report"].split("\n")[2].split("|")[2])}
            results["sizes"].append(row)
            print(f"{hours:g} h: {row['units']} units, {row['flights']} flights, wall {wall:.1f} s, "
                  f"section {row['section_s']:.1f} s, GPU-step peak RSS {row['gpu_step_peak_rss_mib']:.0f} MiB",
                  flush=True)
        small = results["sizes"][0]
        work = pathlib.Path(tmp) / "kill"
        make_partition(work / "source", small["hours"])
        env = environment(work, work / "source")
        kill = kill_and_resume(env, config, small["flights"]) | {"uninterrupted_s": small["wall_s"]}
        kill["start_over_s"] = round(kill["killed_after_s"] + small["wall_s"], 1)
        results["kill"] = kill
    sizes = results["sizes"]
    if len(sizes) > 1:
        growth = sizes[-1]["gpu_step_peak_rss_mib"] / sizes[0]["gpu_step_peak_rss_mib"]
        print(f"GPU-step peak RSS {sizes[-1]['hours']:g} h vs {sizes[0]['hours']:g} h: {growth:.2f}x")
        results["rss_growth"] = round(growth, 3)
    print(f"kill at {kill['committed_at_kill']}/{kill['flights']} flights committed ({kill['killed_after_s']:.1f} s "
          f"in), re-execution from failure {kill['resume_s']:.1f} s: finished after {kill['total_s']:.1f} s in all, "
          f"vs {kill['uninterrupted_s']:.1f} s uninterrupted and {kill['start_over_s']:.1f} s starting over")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
