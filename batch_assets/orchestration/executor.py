"""Which executor runs the steps: one pod per step on Kubernetes, one process per step elsewhere.

`BATCH_ASSETS_EXECUTOR=k8s` (set by the Helm values) selects dagster-k8s's `k8s_job_executor`, so each GPU
step (the shards and the assembly) gets its own pod with the `dagster-k8s/config` from its op tags (one
`nvidia.com/gpu`, node selector, tolerations) while the CPU steps run in plain pods. `multiprocess` (the
default, also when unset or empty) keeps Dagster's default multiprocess executor, which is what `dagster dev`
and the tests use; any other value stops the code location (`settings.py`). dagster-k8s is imported only when
selected. With the multiprocess executor, its coordinator sleeps while a step waits for a pool slot
(`dagster_adapter.py`).
"""

import dagster as dg

from batch_assets.orchestration.dagster_adapter import install_pool_wait_sleep
from batch_assets.settings import Settings


def executor_for(settings: Settings) -> dg.ExecutorDefinition | None:
    """The settings' executor (`BATCH_ASSETS_EXECUTOR`): None is Dagster's default, multiprocess."""
    if settings.executor == "multiprocess":
        install_pool_wait_sleep()
        return None  # Dagster's default
    from dagster_k8s import k8s_job_executor

    return k8s_job_executor
