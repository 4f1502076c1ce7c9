"""A day stopped with Ctrl-C once its first GPU step is done, then a plain `batch-assets run`: what it redoes.

Issue 56's case, through `batch-assets run` only: copies of the sample partition's units (~`--hours` audio-hours),
in 4 GPU steps (`BATCH_ASSETS_SHARD_AUDIO_SECONDS`: the audio over 3.5). It runs the day uninterrupted in a fresh
instance and storage; then, in another, starts it, sends SIGINT to the command's process group (Ctrl-C in a
terminal) once its first GPU step has succeeded (read from the run's event log), waits for the command to end,
and runs `batch-assets run` again, plainly. For each run it prints the GPU steps' seconds (first start to success,
summed: one GPU at a time, the embedded default's pool), and for the second run the flights it reused from the
stopped run and those it computed (its `transcripts` metadata). The target: the second run's GPU steps take at most
the uninterrupted run's minus half of the stopped run's first GPU step.

    .venv/bin/python benchmarks/stopped_run.py [--hours 1.0] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from report import emit  # noqa: E402
from resume import SHARDS, steps  # noqa: E402
from shards import PARTITION, environment, make_partition, transcripts_metadata  # noqa: E402


def gpu_seconds(env: dict, run_id: str) -> tuple[float, dict]:
    found = steps(env, run_id)
    gpu = {key: found["step_seconds"][key] for key in found["gpu_steps"] if key in found["step_seconds"]}
    return round(sum(gpu.values()), 1), gpu


def command(env: dict, log: pathlib.Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "batch_assets.cli", "run", "--partition", PARTITION], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def first_gpu_step_done(env: dict) -> str | None:
    """The key of the run's first GPU step to succeed, once one has."""
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        runs = instance.get_runs(limit=1)
        if not runs:
            return None
        done = [e.step_key for e in instance.all_logs(runs[0].run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
                if (e.step_key or "").startswith("gpu_section.gpu_shard[")]
    return done[0] if done else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="stopped-run-"))
    audio_s = make_partition(work / "source", args.hours)
    shard_s = str(max(60, int(audio_s / (SHARDS - 0.5))))
    report: dict = {"audio_hours": round(audio_s / 3600, 3), "shard_audio_seconds": int(shard_s)}

    whole = environment(work / "whole", work / "source") | {"BATCH_ASSETS_SHARD_AUDIO_SECONDS": shard_s}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", "--partition", PARTITION], env=whole,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report["uninterrupted_wall_s"] = round(time.perf_counter() - started, 1)
    with __import__("dagster").DagsterInstance.from_config(whole["DAGSTER_HOME"]) as instance:
        whole_run = instance.get_runs(limit=1)[0].run_id
    report["uninterrupted_gpu_s"], report["uninterrupted_gpu_steps"] = gpu_seconds(whole, whole_run)
    print(f"uninterrupted: {report['uninterrupted_gpu_s']} s in {len(report['uninterrupted_gpu_steps'])} GPU steps",
          flush=True)

    env = environment(work / "stopped", work / "source") | {"BATCH_ASSETS_SHARD_AUDIO_SECONDS": shard_s}
    proc = command(env, work / "stopped.log")
    while (first := first_gpu_step_done(env)) is None:
        if proc.poll() is not None:
            tail = (work / "stopped.log").read_text()[-2000:]
            raise RuntimeError(f"the run ended before a GPU step succeeded: {tail}")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    sent = time.perf_counter()
    proc.wait(timeout=120)
    report["stopped_exit_code"], report["stopped_ended_after_s"] = proc.returncode, round(time.perf_counter() - sent, 1)
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        stopped = instance.get_runs(limit=1)[0]
    report["stopped_run_status"] = stopped.status.value
    _, stopped_steps = gpu_seconds(env, stopped.run_id)
    report["stopped_first_gpu_step"], report["stopped_first_gpu_step_s"] = first, stopped_steps.get(first)
    print(f"stopped after {first} ({report['stopped_first_gpu_step_s']} s): {report['stopped_run_status']}",
          flush=True)

    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", "--partition", PARTITION], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report["after_wall_s"] = round(time.perf_counter() - started, 1)
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        after_run = instance.get_runs(limit=1)[0].run_id
    report["after_gpu_s"], report["after_gpu_steps"] = gpu_seconds(env, after_run)
    meta = transcripts_metadata(env)
    report["after_flights_reused_from_other_runs"] = meta.get("flights_reused_from_other_runs")
    report["after_resumed_flights"] = meta.get("resumed_flights")
    report["after_flights_redone"] = meta.get("flights_redone")
    limit = report["uninterrupted_gpu_s"] - (report["stopped_first_gpu_step_s"] or 0.0) / 2
    report["target_after_gpu_s_at_most"] = round(limit, 1)
    report["target_met"] = report["after_gpu_s"] <= limit
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
