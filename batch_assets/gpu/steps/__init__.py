"""The GPU section's Dagster steps: what each of the five ops does, its run config, resource and the values
between them.

`run_config.py` (the run config and each op's part), `resources.py` (`GpuResource`: the models per process, the
device, the lock, quarantine), `shard_values.py` (`ShardSpec`, `ShardReport`), `shards.py` (flights grouped into
shards), `resume.py` (which flights a step owns, which are left over), `shard_work.py` (a shard or leftover step:
owned and resumed flights through the locked section), `leftovers.py` (the flights left uncommitted),
`assembly.py` (the tables from the commits), `metadata.py` (the materializations' metadata), `progress.py` (a
line per committed flight), `stop_requests.py` (a stop signal acted on at the next safe point).

May import: gpu.adapters, gpu.asr, gpu.device, gpu.outputs, gpu.section.
"""
