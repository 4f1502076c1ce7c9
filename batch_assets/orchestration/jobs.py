"""The asset job over all six assets (and their checks), for one partition per run.

The daily schedule targets it; the UI's "Materialize" and backfills work on the assets directly.
Transient failures are retried at two levels: each asset's `RetryPolicy` retries its step in the same
run (object-storage hiccups, a step that raised, a step pod lost with its node), and the instance's run
retries (`run_retries` in dagster.yaml / `dagsterDaemon.runRetries` in the Helm values, with run monitoring
on Kubernetes) relaunch a run that failed for another reason, such as a lost run pod, from the failed step
on; on Kubernetes also a run whose step failed past its retries (`orchestration/run_retries.py`). Failures
that a retry cannot fix are retried at neither level: a GPU worker quarantined for a changed decoder mode
(rerun the partition: the new run gets a fresh process, on Kubernetes a fresh pod), a guard's refusal, a
lease another live run holds and a bad `units` request (their steps tag the run so). A device fault
quarantines its worker too, but its step is retried, in a fresh process or pod.
"""

import dagster as dg

from batch_assets.exports.assets import transcript_exports
from batch_assets.gpu.assets import gpu_section
from batch_assets.ingest.assets import fetched_audio, prepared_flights
from batch_assets.orchestration.freshness import transcripts_freshness_checks
from batch_assets.orchestration.run_retries import refusals_are_not_retried

all_assets = [asset.with_hooks({refusals_are_not_retried})
              for asset in (fetched_audio, prepared_flights, gpu_section, transcript_exports)]

transcribe_partition_job = dg.define_asset_job(
    "transcribe_partition",
    # the assets and their checks, but transcripts' freshness: a run of an older day would fail it again while
    # yesterday is missing; its own sensor evaluates it (`orchestration/freshness.py`)
    selection=dg.AssetSelection.assets(*all_assets) - dg.AssetSelection.checks(*transcripts_freshness_checks),
    description="Fetch, prepare, run the GPU section (VAD -> diarization -> ASR) and export the transcripts for one "
    "daily partition.",
    tags={"dagster/max_retries": "2", "dagster/retry_strategy": "FROM_FAILURE"},
)
