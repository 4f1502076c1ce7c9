"""The alert sensors: a run that failed for good, and an asset check of severity ERROR that failed, each queue one
message for BATCH_ASSETS_ALERT_WEBHOOK_URL, and `deliver_alerts` posts what is queued (`alerts/outbox.py`).

Why sensors: a sensor runs in the daemon, beside the runs, so a slow or dead webhook never blocks or fails a run,
and a run killed with its node is still reported (run monitoring, or `free_dead_runs`, fails it; this sensor sees
the failure). Why an outbox: no sensor waits on the webhook; the one that posts has its own budget a tick, one short
try a message, and a webhook that is down for hours gets each message once it answers. What is told:

- `alert_failed_runs`: a run of this code location that failed and that the instance's run retries will not
  relaunch (`dagster/will_retry`): its partition(s), the steps that failed and why (a guard's refusal reads as its
  own description), and its link when BATCH_ASSETS_WEBSERVER_URL is set. A run the instance retries is told only
  when its last retry fails.
- `alert_failed_checks`: every failed evaluation of an ERROR check in a run that succeeded (the freshness check,
  `orchestration/freshness.py`, the baseline gate, a non-blocking check), its partition and description; a blocking
  check that fails (`units_accounted_for`, the exports' checks) fails its run, which `alert_failed_runs` tells.
- the late-audio sensor's objects gone from a published day (`orchestration/late_audio.py`).

Both are Dagster's run status sensors: each keeps a cursor in the instance of the runs it has seen, starting from
its first tick, and each message is queued under a key (the run, the check, the day's gone objects), so a restart
of the daemon tells nothing twice.

No URL set: nothing is queued or sent (the tick says so); the UI shows the same runs and checks. Messages name no
secret: no URL, no credential, only run ids, partitions, steps and what the steps said.
"""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg

from batch_assets.alerts.outbox import DELIVERY_BUDGET_S, DELIVERY_INTERVAL_S, TRY_TIMEOUT_S, deliver, queue
from batch_assets.alerts.webhook import plain_line
from batch_assets.settings import current_settings
from batch_assets.storage.resource import StorageResource

WILL_RETRY_TAG = "dagster/will_retry"
JOB_NAME = "transcribe_partition"
FRESHNESS_CHECK = "freshness_check"


def sensor_status() -> dg.DefaultSensorStatus:
    """Running where BATCH_ASSETS_SENSORS_RUNNING=true (the Helm values), stopped under a local `make dev`."""
    on = current_settings().sensors_running
    return dg.DefaultSensorStatus.RUNNING if on else dg.DefaultSensorStatus.STOPPED


STARTS_WITH = "Starts on with BATCH_ASSETS_SENSORS_RUNNING=true (the Helm values set it)."


def tell(log: Callable[[str], None], storage: StorageResource, key: str, text: str) -> None:
    """Queue `text` (under `key`: one message per key) for the alert webhook; the outcome goes to `log` (the sensor's
    tick). Nothing is posted here: `deliver_alerts` posts."""
    text = plain_line(text)  # one line: a key cannot forge a log line
    if current_settings().alert_webhook_url is None:
        log(f"not sent (BATCH_ASSETS_ALERT_WEBHOOK_URL is not set): {text}")
    elif queue(storage, key, text):
        log(f"queued for the alert webhook (deliver_alerts posts it): {text}")
    else:
        log(f"queued for the alert webhook already: {text}")


@dg.sensor(name="deliver_alerts", minimum_interval_seconds=DELIVERY_INTERVAL_S, default_status=sensor_status(),
           description="Posts the alerts the other sensors queued (alerts/outbox.py) to "
           f"BATCH_ASSETS_ALERT_WEBHOOK_URL, oldest first, one {TRY_TIMEOUT_S:.0f} s try each within "
           f"{DELIVERY_BUDGET_S:.0f} s a tick; a webhook that does not answer keeps them for the next tick. "
           + STARTS_WITH)
def deliver_alerts(context: dg.SensorEvaluationContext, storage: StorageResource):
    url = current_settings().alert_webhook_url
    if url is None:
        return dg.SkipReason("BATCH_ASSETS_ALERT_WEBHOOK_URL is not set: nothing is queued or sent")
    report = deliver(storage, url)
    for text in report.sent:
        context.log.info(f"sent to the alert webhook: {text}")
    for line in report.refused:
        context.log.error(f"refused by the alert webhook, kept under alerts/refused/ ({line})")
    for line in report.failed:
        context.log.warning(f"NOT sent to the alert webhook ({line}); tried again next tick")
    return dg.SkipReason(f"{len(report.sent)} sent, {len(report.refused)} refused, {report.left} queued")


def run_link(run_id: str) -> str:
    base = current_settings().webserver_url
    return f"{base.rstrip('/')}/runs/{run_id}" if base else f"run {run_id}"


def run_days(tags: dict[str, str]) -> tuple[str, str] | None:
    """(first, last) day a run's tags name: its partition, or a backfill run's range; None for neither."""
    if "dagster/partition" in tags:
        return tags["dagster/partition"], tags["dagster/partition"]
    start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
    return (start, end) if start and end else None


def run_partitions(tags: dict[str, str]) -> str:
    """The partition (or backfill range) a run's tags name, or ''."""
    days = run_days(tags)
    return "" if days is None else days[0] if days[0] == days[1] else f"{days[0]}..{days[1]}"


def _first_line(text: str, limit: int = 400) -> str:
    line = next((x.strip() for x in (text or "").splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[:limit - 1] + "…"


def failed_steps(context: dg.RunFailureSensorContext) -> list[str]:
    """'step: why' for each step failure of the run (a `dg.Failure`'s description, else the error's first line)."""
    out = []
    for event in context.get_step_failure_events():
        data = event.step_failure_data
        why = (data.user_failure_data.description if data.user_failure_data and data.user_failure_data.description
               else (data.error.message if data.error else event.message))
        out.append(f"{event.step_key}: {_first_line(why)}")
    return out


def failed_run_text(run: dg.DagsterRun, steps: list[str], run_failure: str | None) -> str:
    partition = run_partitions(dict(run.tags))
    head = f"batch_assets: run {run.run_id} of {run.job_name} failed" + (f" ({partition})" if partition else "")
    why = "; ".join(dict.fromkeys(steps)) if steps else _first_line(run_failure or "no step failed")
    return f"{head}. {why}. {run_link(run.run_id)}"


def ours(run: dg.DagsterRun) -> bool:
    """A run of this project's job or of its assets (the UI's Materialize, a check's run). The sensors watch every
    code location (`monitor_all_code_locations`): Dagster matches a run to a location by the origin a launch from
    the UI or the daemon records, which a run started in a process (`batch-assets run`, `execute_job`) has not."""
    return run.job_name == JOB_NAME or run.job_name.startswith("__ASSET_JOB")


@dg.run_failure_sensor(name="alert_failed_runs", minimum_interval_seconds=30, default_status=sensor_status(),
                       monitor_all_code_locations=True,
                       description="Queues one message per run that failed and will not be retried (its partition, "
                       "the steps that failed and why, its link) for BATCH_ASSETS_ALERT_WEBHOOK_URL (deliver_alerts "
                       "posts it). " + STARTS_WITH)
def alert_failed_runs(context: dg.RunFailureSensorContext, storage: StorageResource):
    run = context.instance.get_run_by_id(context.dagster_run.run_id) or context.dagster_run
    if not ours(run):
        return
    if run.tags.get(WILL_RETRY_TAG) == "true":
        context.log.info(f"run {run.run_id} failed; the instance retries it: told if its last retry fails")
        return
    failure = context.failure_event.message if context.failure_event else None
    tell(context.log.warning, storage, f"run-failed {run.run_id}", failed_run_text(run, failed_steps(context), failure))


def failed_check_text(evaluation, run_id: str) -> str:
    """The message for a failed ERROR check: a freshness miss says so."""
    what = evaluation.description or ""
    if evaluation.check_name == FRESHNESS_CHECK:
        return (f"batch_assets: freshness miss: {evaluation.asset_key.to_user_string()} not published by "
                f"{current_settings().freshness_deadline} UTC (BATCH_ASSETS_FRESHNESS_DEADLINE). {what}")
    partition = f" ({evaluation.partition})" if evaluation.partition else ""
    return (f"batch_assets: check {evaluation.check_name} of {evaluation.asset_key.to_user_string()} failed"
            f"{partition}. {what} {run_link(run_id)}".replace("  ", " "))


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.SUCCESS, name="alert_failed_checks", minimum_interval_seconds=30,
                      default_status=sensor_status(), monitor_all_code_locations=True,
                      description="Queues one message per failed asset check of severity ERROR in a run that succeeded "
                      "(a freshness miss among them; a blocking check that fails fails its run, which "
                      "alert_failed_runs tells) for BATCH_ASSETS_ALERT_WEBHOOK_URL (deliver_alerts posts it). "
                      + STARTS_WITH)
def alert_failed_checks(context: dg.RunStatusSensorContext, storage: StorageResource):
    run_id = context.dagster_run.run_id
    if not ours(context.dagster_run):
        return
    for record in context.instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = record.dagster_event.event_specific_data
        if evaluation.passed or evaluation.severity != dg.AssetCheckSeverity.ERROR:
            continue
        if evaluation.check_name == FRESHNESS_CHECK and _missed_before(context.instance, evaluation, run_id):
            context.log.info(f"freshness miss already told: {evaluation.description}")
            continue
        tell(context.log.warning, storage, f"check-failed {run_id} {evaluation.asset_key.to_user_string()} "
             f"{evaluation.check_name} {evaluation.partition}", failed_check_text(evaluation, run_id))


def _missed_before(instance, evaluation, run_id: str) -> bool:
    """Whether the freshness check's previous evaluation (another run's) failed for the same day: a miss is told
    once, however often its sensor evaluates it before the day is published (after each materialization of any day)."""
    key = dg.AssetCheckKey(evaluation.asset_key, evaluation.check_name)
    history = instance.event_log_storage.get_asset_check_execution_history(key, limit=10)
    previous = next((r for r in history if r.run_id != run_id and r.status.value in ("SUCCEEDED", "FAILED")
                     and r.event is not None), None)
    if previous is None or previous.status.value != "FAILED":
        return False
    return previous.event.dagster_event.event_specific_data.description == evaluation.description
