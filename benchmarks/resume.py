"""GPU steps per run, and a resumed run's wall time: a partition in 4 shards, killed in its first shard.

The case of issue 20's bar 9: copies of the sample partition's units, every unit a flight, in 4 shards
(`shard_audio_seconds`: the audio over 3.5). It runs the job `transcribe_partition` uninterrupted (one
process per step, a fresh instance, the embedded default's pool of one GPU step at a time), then again in a
fresh instance killed (SIGKILL to every process of the run) once its first flight is committed, marked failed as
run monitoring would, and re-executed from failure. For each run it prints the GPU steps (steps whose op is in
the `gpu` pool: one GPU pod each on Kubernetes), the wall time, and the GPU section's seconds: its steps one
after another (here) and with a GPU per step (each fan-out as long as its longest step: a pool of 4 GPUs). It
counts by the op's pool in the code it runs, so the same script measures an older checkout
(`PYTHONPATH=<checkout>`).

    .venv/bin/python benchmarks/resume.py [--hours 0.2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from report import emit  # noqa: E402
from shards import DRIVER, PARTITION, environment, make_partition  # noqa: E402

SHARDS = 4


def steps(env: dict, run_id: str) -> dict:
    """The run's GPU steps (those that started, whose op asks for the `gpu` pool) and each step's seconds, from its
    first start to its success (a step retried counts from its first attempt)."""
    import dagster as dg

    from batch_assets.definitions import defs

    pools = {op.name: op.pool for op in defs.resolve_job_def("transcribe_partition").all_node_defs
             if isinstance(op, dg.OpDefinition)}
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        events = instance.all_logs(run_id, of_type={dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS})
    started, seconds = {}, {}
    for event in events:
        if event.dagster_event.event_type == dg.DagsterEventType.STEP_START:
            started.setdefault(event.step_key, event.timestamp)
        else:
            seconds[event.step_key] = round(event.timestamp - started[event.step_key], 2)
    gpu = sorted(key for key in started if pools.get(key.split("[")[0].split(".")[-1]) == "gpu")
    return {"gpu_steps": gpu, "step_seconds": seconds}


def critical_path_s(step_seconds: dict) -> float:
    """The GPU section's seconds with a GPU per step (a pool as large as the widest fan-out): its steps in order,
    each fan-out (`op[key]`) as long as its longest step."""
    stages: dict[str, float] = {}
    for key, value in step_seconds.items():
        if key.startswith("gpu_section."):
            op = key.split("[")[0]
            stages[op] = max(stages.get(op, 0.0), value)
    return round(sum(stages.values()), 1)


def latest_run(env: dict):
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        return instance.get_runs(limit=1)[0]


def run(env: dict, config: dict, *extra: str) -> tuple[float, str]:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", DRIVER, PARTITION, json.dumps(config), *extra], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started, latest_run(env).run_id


def killed_in_first_shard(env: dict, config: dict) -> tuple[float, str]:
    """Launch, kill once the first flight is committed, fail the run as run monitoring would."""
    import dagster as dg

    work = pathlib.Path(env["BATCH_ASSETS_STORAGE_URL"]) / "gpu_work" / PARTITION
    started = time.perf_counter()
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, PARTITION, json.dumps(config)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while not list(work.glob("*/*.commit.json")):
        if driver.poll() is not None:
            raise RuntimeError("the run finished before the kill")
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        [dead] = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.STARTED]
        instance.report_run_failed(dead)
        instance.event_log_storage.free_concurrency_slots_for_run(dead.run_id)
    return time.perf_counter() - started, dead.run_id


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=0.2, help="audio-hours of copies of the sample's units")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-resume-") as tmp:
        for case in ("uninterrupted", "resumed"):
            work = pathlib.Path(tmp) / case
            audio_s = make_partition(work / "source", args.hours)
            env = environment(work, work / "source") | {"BATCH_ASSETS_GPU_RETRY_DELAY_SECONDS": "1"}
            config = {"ops": {"prepared_flights": {"config": {"decode_budget_seconds": 50.0}},
                              "gpu_section": {"config": {"shard_audio_seconds": audio_s / (SHARDS - 0.5)}}}}
            if case == "uninterrupted":
                wall, run_id = run(env, config)
                results[case] = {"audio_s": round(audio_s, 1), "wall_s": round(wall, 1)} | steps(env, run_id)
            else:
                killed_after, dead = killed_in_first_shard(env, config)
                wall, run_id = run(env, config, dead)
                results[case] = {"killed_after_s": round(killed_after, 1),
                                 "killed_run_gpu_steps": steps(env, dead)["gpu_steps"], "wall_s": round(wall, 1)
                                 } | steps(env, run_id)
            row = results[case]
            section = sum(v for k, v in row["step_seconds"].items() if k.startswith("gpu_section."))
            row["gpu_section_s"], row["gpu_section_one_gpu_per_step_s"] = round(section, 1), critical_path_s(
                row["step_seconds"])
            killed = f" (killed after {row['killed_after_s']:.1f} s, in {row['killed_run_gpu_steps']})" \
                if case == "resumed" else ""
            print(f"{case}: {len(row['gpu_steps'])} GPU step(s) in {row['wall_s']:.1f} s (GPU section's steps "
                  f"{row['gpu_section_s']:.1f} s one at a time, {row['gpu_section_one_gpu_per_step_s']:.1f} s with a "
                  f"GPU per step): {row['gpu_steps']}{killed}", flush=True)
    emit(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
