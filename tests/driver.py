"""One run of `transcribe_partition` as a process, the way a run worker runs it (tests/deployments.py launches it).

`python -m tests.driver '{"partition": "2026-01-15"}'`; other keys: `last` (a backfill run over a range, as
the BackfillPolicy makes), `run_config`, `assets` (a subset, e.g. the GPU assets for a `units` rerun),
`reexecute_from` (a failed run's id: a re-execution from failure with that run's tags and config, what the
instance's run retries launch) and `execution` (the executor config, over the run config's or the parent's).
Prints `DRIVER {"run_id": ..., "success": ..., "wall_s": ...}` last.

`launch` starts it as tests/deployments.py does: a process forked from this test process's driver server, a
multiprocessing forkserver that imported the libraries every run's process imports (`PRELOAD`, ~20 s of CPU here
for each fresh interpreter), so a run's process starts in a fraction of a second. It is still a process of its own,
in a session of its own (`os.killpg` kills it with its step processes), with the run's environment, working folder
and log, and what a fresh interpreter would run at start-up from its PYTHONPATH (tests/isolated). Nothing of
batch_assets is preloaded or imported before the run's environment is in place: its settings are read once per
process, from that environment.
"""

import json
import multiprocessing
import os
import pathlib
import runpy
import subprocess
import sys
import tempfile
import time
import warnings

# what the driver server imports once: Dagster and its PostgreSQL storage, torch, NeMo, pyannote, the tables and S3
PRELOAD = ["dagster", "dagster_postgres", "torch", "nemo.collections.asr", "pyannote.audio", "polars", "s3fs"]


class Launched:
    """A run's process forked by the driver server, with what the tests use of `subprocess.Popen`."""

    def __init__(self, process: multiprocessing.process.BaseProcess, args: dict):
        self._process, self.args, self.pid = process, args, process.pid

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(f"tests.driver {json.dumps(self.args)}", timeout)
        return self._process.exitcode


def launch(args: dict, env: dict[str, str], log: pathlib.Path, cwd: pathlib.Path) -> Launched:
    """One run (`main(args)`) in a process of its own, forked from the driver server (started, with `PRELOAD`
    imported, on the first call in this process), in its own session once this returns."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    process = context.Process(target=_forked, args=(args, env, str(log), str(cwd)), name="tests.driver")
    process.start()
    deadline = time.monotonic() + 60
    while process.exitcode is None and time.monotonic() < deadline:
        try:
            if os.getpgid(process.pid) == process.pid:  # its own session: a killpg reaches it and only it
                break
        except ProcessLookupError:
            break
        time.sleep(0.005)
    return Launched(process, args)


def _forked(args: dict, env: dict[str, str], log: str, cwd: str) -> None:
    """In the forked process: a session, log, folder and environment of its own, then the run."""
    os.setsid()
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # from TMPDIR again
    if env.get("PYTHONWARNINGS") == "ignore":
        warnings.simplefilter("ignore")
    for folder in filter(None, env.get("PYTHONPATH", "").split(os.pathsep)):
        if (startup := pathlib.Path(folder) / "sitecustomize.py").is_file():
            runpy.run_path(str(startup))
    sys.exit(main(args))


def main(args: dict) -> int:
    import dagster as dg

    from batch_assets.cli.commands import transcribe_partition_job

    instance = dg.DagsterInstance.get()
    options, run_config = None, args.get("run_config")
    if args.get("reexecute_from"):
        parent = instance.get_run_by_id(args["reexecute_from"])
        options, tags, run_config = (dg.ReexecutionOptions.from_failure(parent.run_id, instance), parent.tags,
                                     parent.run_config)
    elif args.get("last"):
        tags = {"dagster/asset_partition_range_start": args["partition"],
                "dagster/asset_partition_range_end": args["last"]}
    else:
        tags = {"dagster/partition": args["partition"]}
    if args.get("execution"):
        run_config = (run_config or {}) | {"execution": args["execution"]}
    assets = [dg.AssetKey(key) for key in args["assets"]] if args.get("assets") else None
    started = time.perf_counter()
    result = dg.execute_job(dg.reconstructable(transcribe_partition_job), instance=instance, tags=tags,
                            run_config=run_config, asset_selection=assets, reexecution_options=options)
    print("DRIVER " + json.dumps({"run_id": result.run_id, "success": result.success,
                                  "wall_s": round(time.perf_counter() - started, 1)}), flush=True)
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
