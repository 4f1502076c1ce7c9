"""Which failed runs the instance's run retries relaunch: every one but those a step refused.

On Kubernetes a GPU node can vanish under a step pod (preemptible nodes). dagster-k8s's step health check then
fails the step (its Job, `backoffLimit: 0`, has a failed pod), the step's `RetryPolicy` runs it again in a new pod,
and once those retries are spent the run fails with a step failure. The Helm values set
`runRetries.retryOnAssetOrOpFailure: true`, so the run-retry daemon relaunches such a run from failure (the GPU
steps resume from their flight commits: nothing committed is redone). A step that refuses (`dg.Failure` with
`allow_retries=False`: a guard, a bad request, a lease another live run holds, a quarantined worker) would fail the
same way again: the failure hook below tags its run `dagster/retry_on_asset_or_op_failure: false`, which the daemon
reads (the run's tag wins over the instance's setting) before it relaunches anything, so a refused run is not
retried. Attached to every asset's ops (`orchestration/jobs.py`), so backfills and UI materializations get it too.
"""

import dagster as dg

RETRY_ON_STEP_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"  # Dagster's run tag (dagster/_core/storage/tags.py)


def is_refusal(error: BaseException | None) -> bool:
    """A failure that no retry can fix: the step said so (`dg.Failure(allow_retries=False)`)."""
    return isinstance(error, dg.Failure) and not error.allow_retries


@dg.failure_hook(name="refusals_are_not_retried")
def refusals_are_not_retried(context: dg.HookContext) -> None:
    if is_refusal(context.op_exception):
        context.instance.add_run_tags(context.run_id, {RETRY_ON_STEP_FAILURE_TAG: "false"})
        context.log.info(f"{context.op.name} refused: this run is not retried by the instance's run retries "
                         f"({RETRY_ON_STEP_FAILURE_TAG}=false); fix the cause, then rerun or re-execute it")
