"""Which executor runs the steps: one pod per step on Kubernetes, one process per step elsewhere.

`BATCH_ASSETS_EXECUTOR=k8s` (set by the Helm values) selects dagster-k8s's `k8s_job_executor`, so each GPU
step (the shards and the assembly) gets its own pod with the `dagster-k8s/config` from its op tags (one
`nvidia.com/gpu`, node selector, tolerations) while the CPU steps run in plain pods. Anything else keeps
Dagster's default multiprocess executor, which is what `dagster dev` and the tests use. dagster-k8s is imported only when selected.
"""

from collections.abc import Mapping

import dagster as dg

from batch_assets.settings import env_choice


def executor_from_env(environ: Mapping[str, str] | None = None) -> dg.ExecutorDefinition | None:
    if env_choice("BATCH_ASSETS_EXECUTOR", "multiprocess", ("k8s", "multiprocess"), environ) == "multiprocess":
        return None  # Dagster's default
    from dagster_k8s import k8s_job_executor

    return k8s_job_executor
