"""One run of `transcribe_partition` as a process, the way a run worker runs it (tests/deployments.py launches it).

`python -m tests.driver '{"partition": "2026-01-15"}'`; other keys: `last` (a backfill run over a range, as
the BackfillPolicy makes), `run_config`, `assets` (a subset, e.g. the GPU assets for a `units` rerun),
`reexecute_from` (a failed run's id: a re-execution from failure with that run's tags and config, what the
instance's run retries launch) and `execution` (the executor config, over the run config's or the parent's).
Prints `DRIVER {"run_id": ..., "success": ..., "wall_s": ...}` last.
"""

import json
import sys
import time

import dagster as dg

from batch_assets.cli.commands import transcribe_partition_job


def main(args: dict) -> int:
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
