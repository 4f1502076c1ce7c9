"""The code location: six partitioned assets, their checks, the job, the schedule, the sensors, the resources.

NeMo and pyannote are imported only when the GPU step runs, so loading this module (which the
webserver, the daemon and every step process do) takes a couple of seconds.
"""

import dagster as dg

from batch_assets.exports.assets import exports_checks
from batch_assets.gate.checks import BaselineResource, transcripts_checks
from batch_assets.gpu.assets import GPU_IO
from batch_assets.gpu.steps.resources import GpuResource
from batch_assets.orchestration.alerts import alert_failed_checks, alert_failed_runs, deliver_alerts
from batch_assets.orchestration.dead_runs import free_dead_runs_sensor
from batch_assets.orchestration.executor import executor_for
from batch_assets.orchestration.freshness import transcripts_freshness_checks, transcripts_freshness_sensor
from batch_assets.orchestration.io_manager import StorageJsonIOManager
from batch_assets.orchestration.jobs import all_assets, transcribe_partition_job
from batch_assets.orchestration.late_audio import late_audio_sensor
from batch_assets.orchestration.schedules import daily_transcription_schedule
from batch_assets.settings import Settings, current_settings
from batch_assets.storage.resource import StorageResource

STORAGE_FIELDS = ("source_url", "storage_url", "s3_endpoint_url", "s3_region")  # StorageResource's, in Settings


def build_resources(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    """Every resource, from the settings, in one place (strings as `dg.EnvVar` when set; README: Configuration)."""
    storage = StorageResource(**{field: settings.resource_value(field) for field in STORAGE_FIELDS})
    return {
        "storage": storage,
        GPU_IO: StorageJsonIOManager(storage=storage),
        "gpu": GpuResource(
            asr_models=dict(settings.asr_models),
            asr_model=settings.resource_value("asr_model"),
            language_id_model=settings.resource_value("language_id_model"),
            diarization_pipeline=settings.resource_value("diarization_pipeline"),
            device=settings.resource_value("device"),
            lock_dir=settings.resource_value("lock_dir"),
            torch_threads=settings.torch_threads,
            word_confidence=settings.word_confidence,
        ),
        "baseline": BaselineResource(storage_url=settings.resource_value("baseline_url") or ""),
    }


def storage_from_env() -> StorageResource:
    """The storage resource with the settings' values (for the CLI, outside a run)."""
    return StorageResource(**{field: getattr(current_settings(), field) for field in STORAGE_FIELDS})


defs = dg.Definitions(
    assets=all_assets,
    asset_checks=[*transcripts_checks, *exports_checks, *transcripts_freshness_checks],
    jobs=[transcribe_partition_job],
    schedules=[daily_transcription_schedule],
    sensors=[free_dead_runs_sensor, late_audio_sensor, transcripts_freshness_sensor, alert_failed_runs,
             alert_failed_checks, deliver_alerts],
    resources=build_resources(current_settings()),
    executor=executor_for(current_settings()),
)


def transcribe_partition() -> dg.JobDefinition:
    """The job, resolved, for `dg.reconstructable` (what `batch-assets run` executes on the instance)."""
    return defs.resolve_job_def("transcribe_partition")
