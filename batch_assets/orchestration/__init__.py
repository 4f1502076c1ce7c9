"""The Dagster wiring beside the assets: the job (`jobs.py`), the schedule, the executor, the daily partitions,
the step values' IO manager, the step code the asset packages share (`steps.py`: lease, preflight, guards) and the
sensor that fails dead local runs (`dead_runs.py`), and Dagster's one private reach (`dagster_adapter.py`: the
coordinator sleeps while a step waits for a pool slot)."""
