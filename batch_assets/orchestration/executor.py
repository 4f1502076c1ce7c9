"""Which executor runs the steps: one pod per step on Kubernetes, one forked process per step elsewhere.

`BATCH_ASSETS_EXECUTOR=k8s` (set by the Helm values) selects dagster-k8s's `k8s_job_executor`, so each GPU step (the
shards and their leftover steps) gets its own pod with the `dagster-k8s/config` from its op tags (one
`nvidia.com/gpu`, node selector, tolerations) while the CPU steps (the assembly among them) run in plain pods.
dagster-k8s is imported only when selected. `multiprocess` (the default, also when unset or empty) is Dagster's
default executor (`multi_or_in_process_executor`: a process per step, or `in_process` in the run config) with one
change: a run's step processes are forked from a forkserver that imported the code location and Dagster's instance
storage once per run (`FORKSERVER_PRELOAD`), not each a fresh interpreter importing them again. Why: a fresh step
process spent 2-4 s of CPU on those imports before its own work; a run of a one-unit day has about a dozen steps
(measured here, `batch-assets run`: 70 s spawned, 41 s forked). The model libraries are not preloaded: only the GPU
steps import them, and a run that never reaches one would wait for them. A run config that names a `start_method`
(`spawn`, or `forkserver` with its own `preload_modules`) gets what it names. With the multiprocess executor, its
coordinator sleeps while a step waits for a pool slot (`dagster_adapter.py`).

A run launched in a process that lives on (`commands.run()` from a notebook, twice) gets a forkserver of its own:
multiprocessing keeps one per process, so a second run would fork its steps from the first run's, with the code
and the environment (`--storage`, `--device`, a model) the first run's forkserver imported. `stop_run_forkserver`
stops the one a run started once the run has ended (`cli/commands.py`); the next run starts its own. Both reach
into multiprocessing's private state (`_forkserver._forkserver_pid`, `_stop`; the resource tracker's `_pid`, a
service of the host process that ends with it, never a run's): `tests/test_reliability.py` fails loudly where a
Python moves them.
"""

import dagster as dg

from batch_assets.orchestration.dagster_adapter import INSTANCE_STORAGE_MODULES, install_pool_wait_sleep
from batch_assets.settings import Settings

# what the forkserver imports before it forks a run's first step: the code location, then the instance's storage
# (SQLAlchemy, Alembic and Dagster's SQLite and PostgreSQL storages), which each step opens
FORKSERVER_PRELOAD = ("batch_assets.definitions", *INSTANCE_STORAGE_MODULES)


def forked_unless_told(config: dict) -> dict:
    """Dagster's default executor config with the forkserver as the multiprocess start method, unless the run
    config names one (or chooses `in_process`)."""
    multiprocess = config.get("multiprocess")
    if multiprocess is None or multiprocess.get("start_method"):
        return config
    return {"multiprocess": {**multiprocess,
                             "start_method": {"forkserver": {"preload_modules": list(FORKSERVER_PRELOAD)}}}}


def executor_for(settings: Settings) -> dg.ExecutorDefinition:
    """The settings' executor (`BATCH_ASSETS_EXECUTOR`)."""
    if settings.executor == "multiprocess":
        install_pool_wait_sleep()
        default = dg.multi_or_in_process_executor
        return default.configured(forked_unless_told, name=default.name, config_schema=default.config_schema.as_field())
    from dagster_k8s import k8s_job_executor

    return k8s_job_executor


def run_forkserver_pid() -> int | None:
    """The pid of this process's multiprocessing forkserver (None: none running)."""
    from multiprocessing import forkserver

    return forkserver._forkserver._forkserver_pid


def stop_run_forkserver(before: set[int]) -> int | None:
    """Stop this process's forkserver unless it was running before the run (its pid in `before`: a host's own);
    returns the pid stopped. The next run starts a forkserver of its own, importing the code as it is then."""
    from multiprocessing import forkserver

    pid = run_forkserver_pid()
    if pid is None or pid in before:
        return None
    server = forkserver._forkserver
    try:
        server._stop()
    except OSError:  # killed and reaped already (the stop guard's stop): forget it, as `_stop` would have
        server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None
    return pid


def host_services() -> set[int]:
    """multiprocessing's resource tracker, started for a run's forkserver: a service of this process that ends with
    it, never one of the run's processes."""
    from multiprocessing import resource_tracker

    pid = resource_tracker._resource_tracker._pid
    return set() if pid is None else {pid}
