"""The code location: six partitioned assets, their checks, the job, the schedule, the resources.

NeMo and pyannote are imported only when the GPU step runs, so loading this module (which the
webserver, the daemon and every step process do) takes a couple of seconds.
"""

from collections.abc import Callable

import dagster as dg

from batch_assets.dead_runs import free_dead_runs_sensor
from batch_assets.executor import executor_from_env
from batch_assets.exports.assets import exports_checks
from batch_assets.gate.checks import BaselineResource, transcripts_checks
from batch_assets.gpu.assets import GPU_IO
from batch_assets.gpu.lock import DEFAULT_LOCK_DIR
from batch_assets.gpu.resources import GpuResource
from batch_assets.io_manager import StorageJsonIOManager
from batch_assets.jobs import all_assets, transcribe_partition_job
from batch_assets.models.builtin import TINY_DIARIZATION, TINY_TDT
from batch_assets.schedules import daily_transcription_schedule
from batch_assets.settings import env_bool, env_int, env_or, env_str
from batch_assets.storage import DEFAULT_SOURCE_URL, DEFAULT_STORAGE_URL, StorageResource

TORCH_THREADS = env_int("BATCH_ASSETS_TORCH_THREADS", 0, minimum=0, maximum=1024)
WORD_CONFIDENCE = env_bool("BATCH_ASSETS_WORD_CONFIDENCE", True)


# StorageResource's fields, the variables each comes from (the first one set wins) and its default (README: Configuration)
STORAGE_VARIABLES = {"source_url": (("BATCH_ASSETS_SOURCE_URL",), DEFAULT_SOURCE_URL),
                     "storage_url": (("BATCH_ASSETS_STORAGE_URL",), DEFAULT_STORAGE_URL),
                     "s3_endpoint_url": (("BATCH_ASSETS_S3_ENDPOINT_URL",), None),
                     "s3_region": (("AWS_REGION", "AWS_DEFAULT_REGION"), None)}


def _storage(value: Callable[[str, None], object]) -> StorageResource:
    """The storage resource, each field from `value(variable, None)` (`env_or`: a `dg.EnvVar`; `env_str`: the value)."""
    fields = {}
    for field, (variables, default) in STORAGE_VARIABLES.items():
        fields[field] = next((v for v in (value(variable, None) for variable in variables) if v is not None), default)
    return StorageResource(**fields)


def build_resources() -> dict[str, dg.ConfigurableResource]:
    """Every resource, from the environment, in one place (strings as `dg.EnvVar` when set; README: Configuration)."""
    storage = _storage(env_or)
    return {
        "storage": storage,
        GPU_IO: StorageJsonIOManager(storage=storage),
        "gpu": GpuResource(
            asr_model=env_or("BATCH_ASSETS_ASR_MODEL", TINY_TDT),
            diarization_pipeline=env_or("BATCH_ASSETS_DIARIZATION_PIPELINE", TINY_DIARIZATION),
            device=env_or("BATCH_ASSETS_DEVICE", "auto"),
            lock_dir=env_or("BATCH_ASSETS_LOCK_DIR", DEFAULT_LOCK_DIR),
            torch_threads=TORCH_THREADS,
            word_confidence=WORD_CONFIDENCE,
        ),
        "baseline": BaselineResource(storage_url=env_or("BATCH_ASSETS_BASELINE_URL", "")),
    }


def storage_from_env() -> StorageResource:
    """The storage resource with its environment values resolved (for the CLI, outside a run)."""
    return _storage(env_str)


defs = dg.Definitions(
    assets=all_assets,
    asset_checks=[*transcripts_checks, *exports_checks],
    jobs=[transcribe_partition_job],
    schedules=[daily_transcription_schedule],
    sensors=[free_dead_runs_sensor],
    resources=build_resources(),
    executor=executor_from_env(),
)


def transcribe_partition() -> dg.JobDefinition:
    """The job, resolved, for `dg.reconstructable` (what `batch-assets run` executes on the instance)."""
    return defs.resolve_job_def("transcribe_partition")
