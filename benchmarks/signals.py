"""Ctrl-C on `batch-assets run`, again and again: how long the command takes to end, and what it leaves behind.

Issue 48: Ctrl-C (SIGINT to the foreground process group) must end the command within 30 s every time, the run
recorded as canceled or failed, its `gpu` pool slot and partition lease freed, and the next run of the
partition must start at once and succeed. This script launches the command on a copy of the sample partition
(a fresh instance, the embedded default), sends SIGINT to its whole process group at a random moment between
its first step's start and its assembly's start (measured on an unsignalled run first), and records for each try:
the moment, the steps running then, the seconds until the command ended, its exit code, the run's status, the
pool slots still claimed, the partition lease's state, and whether the next run of the partition (run to the end)
succeeded without waiting for a slot or a lease. It prints the tries and the longest exit.
`--second-signal S`: a second SIGINT S seconds after the first (the guard then stops it at once; the command returns
about 2 s later). To measure another checkout's command, run the script with that checkout as the working directory
and on `PYTHONPATH` (`python -m batch_assets.cli` takes the package from the working directory first).

    .venv/bin/python benchmarks/signals.py [--tries 20] [--seed 48] [--json bench_out/signals.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from report import emit  # noqa: E402
from shards import PARTITION, SAMPLE, environment  # noqa: E402

LIMIT_S = 30.0  # the promise
HANG_S = 180.0  # a command still alive this long after the signal is recorded as hung, then killed
# what a run that has to wait logs (taking over a finished run's lease, logged too, is no wait)
WAITED = ("Step blocked by limit for pool gpu", "which is writing it")


def launch(env: dict, log: pathlib.Path) -> tuple[subprocess.Popen, float]:
    process = subprocess.Popen([sys.executable, "-m", "batch_assets.cli", "run", "--partition", PARTITION,
                                "--verbose"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)  # its own group: the terminal's foreground group
    return process, time.monotonic()


def run_events(env: dict) -> tuple[str, dict[str, float], list[str], str]:
    """The newest run: its id, each step's first start (unix), the steps started and not ended, its status."""
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        [run] = instance.get_runs(limit=1)
        kinds = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}
        events = instance.all_logs(run.run_id, of_type=kinds)
    starts: dict[str, float] = {}
    ended = set()
    for event in events:
        if event.dagster_event.event_type == dg.DagsterEventType.STEP_START:
            starts.setdefault(event.step_key, event.timestamp)
        else:
            ended.add(event.step_key)
    return run.run_id, starts, sorted(set(starts) - ended), run.status.value


def left_behind(env: dict, run_id: str) -> dict:
    """What the stopped run still holds: pool slots, and the partition lease's newest record."""
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        slots = instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
        status = instance.get_run_by_id(run_id).status.value
    leases = sorted((pathlib.Path(env["BATCH_ASSETS_STORAGE_URL"]) / ".leases" / PARTITION).glob("gen-*.json"))
    lease = json.loads(leases[-1].read_text()) if leases else None
    return {"status": status, "gpu_slots_claimed": len(slots),
            "lease": None if lease is None else {"holder_is_run": lease["holder"] == run_id,
                                                  "released": lease["released"]}}


def free_by_hand(env: dict, signalled: str) -> None:
    """What an operator does for a next run that waits for ever: fail it, free its slots and the signalled run's."""
    import dagster as dg

    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        for run in instance.get_runs(limit=2):
            if not run.is_finished:
                instance.report_run_failed(run, message="benchmarks/signals.py: blocked past --next-timeout")
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        instance.event_log_storage.free_concurrency_slots_for_run(signalled)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=20)
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument("--second-signal", type=float, default=None, metavar="S")
    parser.add_argument("--no-next-run", action="store_true", help="skip the run to success after each try")
    parser.add_argument("--next-timeout", type=float, default=900.0, metavar="S",
                        help="a next run still going after S seconds is recorded as blocked, killed, and what it "
                        "and the signalled run hold is freed by hand, so that the next try starts clean")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    chooser = random.Random(args.seed)
    work = pathlib.Path(tempfile.mkdtemp(prefix="signals-"))
    shutil.copytree(SAMPLE, work / "source" / PARTITION)
    env = environment(work, work / "source")
    process, started = launch(env, work / "baseline.log")
    assert process.wait(timeout=900) == 0, (work / "baseline.log").read_text()[-3000:]
    baseline_s = time.monotonic() - started
    _, starts, _, _ = run_events(env)
    # moments are measured from the first step's start (the command's own start-up comes before it)
    assembly = max(t for key, t in starts.items() if "assemble_gpu_tables" in key) - min(starts.values())
    tries = []
    for number in range(args.tries):
        log = work / f"try-{number:02d}.log"
        process, launched = launch(env, log)
        while "STEP_START" not in log.read_text():  # the first step started
            assert process.poll() is None, log.read_text()[-3000:]
            time.sleep(0.05)
        at = chooser.uniform(0.0, assembly)
        time.sleep(at)
        running = run_events(env)[2] if process.poll() is None else []
        sent = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        second = False
        if args.second_signal is not None:
            time.sleep(args.second_signal)
            second = process.poll() is None  # still running: the second signal is sent
            if second:
                os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=HANG_S)
            exit_s = time.monotonic() - sent
        except subprocess.TimeoutExpired:
            exit_s = None
            if shutil.which("py-spy"):  # where the command is stuck
                stack = subprocess.run(["py-spy", "dump", "--pid", str(process.pid)], capture_output=True, text=True)
                (work / f"try-{number:02d}.stack").write_text(stack.stdout + stack.stderr)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        run_id, _, _, _ = run_events(env)
        record = {"try": number, "signal_at_s": round(at, 2), "running": running, "second_signal": second,
                  "exit_s": None if exit_s is None else round(exit_s, 2), "returncode": process.returncode,
                  "guard": "stopping the run now" in log.read_text(),
                  # a slot the ended run still claimed (a step ended before it reported), freed by the command
                  "freed_a_claimed_slot": "the ended run still claimed" in log.read_text(),
                  **left_behind(env, run_id)}
        if not args.no_next_run:
            next_log = work / f"next-{number:02d}.log"
            nxt, next_started = launch(env, next_log)
            try:
                code = nxt.wait(timeout=args.next_timeout)
            except subprocess.TimeoutExpired:
                code = None
                os.killpg(nxt.pid, signal.SIGKILL)
                nxt.wait()
                free_by_hand(env, run_id)
            text = next_log.read_text()
            record["next_run"] = {"succeeded": code == 0, "blocked": code is None,
                                  "seconds": round(time.monotonic() - next_started, 1),
                                  "waited": [w for w in WAITED if w in text]}
        tries.append(record)
        print(json.dumps(record), flush=True)
    exits = [t["exit_s"] for t in tries if t["exit_s"] is not None]
    report = {
        "what": "SIGINT to batch-assets run's process group at a random moment from its first step to its assembly",
        "partition": f"the sample partition ({SAMPLE.name}) as {PARTITION}", "device": "cpu",
        "baseline_run_s": round(baseline_s, 1), "first_step_to_assembly_s": round(assembly, 1),
        "second_signal_s": args.second_signal, "tries": len(tries),
        "ended_within_30_s": sum(1 for t in tries if t["exit_s"] is not None and t["exit_s"] <= LIMIT_S),
        "hung": sum(1 for t in tries if t["exit_s"] is None),
        "longest_exit_s": max(exits) if exits else None,
        "median_exit_s": sorted(exits)[len(exits) // 2] if exits else None,
        "stopped_by_the_guard": sum(1 for t in tries if t["guard"]),
        "left_a_slot_claimed": sum(1 for t in tries if t["gpu_slots_claimed"]),
        "slot_freed_by_the_command": sum(1 for t in tries if t["freed_a_claimed_slot"]),
        "next_run_succeeded": sum(1 for t in tries if t.get("next_run", {}).get("succeeded")),
        "next_run_waited": sum(1 for t in tries if t.get("next_run", {}).get("waited")),
        "next_run_blocked": sum(1 for t in tries if t.get("next_run", {}).get("blocked")),
        "statuses": sorted({t["status"] for t in tries}), "work": str(work), "details": tries,
    }
    emit(report, args.json)


if __name__ == "__main__":
    main()
