"""The code location: five partitioned assets, their checks, the job, the schedule, the resources.

NeMo and pyannote are imported only when the GPU step runs, so loading this module (which the
webserver, the daemon and every step process do) takes a couple of seconds.
"""

import dagster as dg

from batch_assets.dead_runs import free_dead_runs_sensor
from batch_assets.executor import executor_from_env
from batch_assets.gate.checks import BaselineResource, transcripts_checks
from batch_assets.gpu.resources import GpuResource
from batch_assets.jobs import all_assets, transcribe_partition_job
from batch_assets.schedules import daily_transcription_schedule
from batch_assets.storage import StorageResource

defs = dg.Definitions(
    assets=all_assets,
    asset_checks=transcripts_checks,
    jobs=[transcribe_partition_job],
    schedules=[daily_transcription_schedule],
    sensors=[free_dead_runs_sensor],
    resources={"storage": StorageResource(), "gpu": GpuResource(), "baseline": BaselineResource()},
    executor=executor_from_env(),
)


def transcribe_partition() -> dg.JobDefinition:
    """The job, resolved, for `dg.reconstructable` (what `batch-assets run` executes on the instance)."""
    return defs.resolve_job_def("transcribe_partition")
