"""The code location: five partitioned assets, their resources, and nothing heavy at import time.

NeMo and pyannote are imported only when the GPU step runs, so loading this module (which the
webserver, the daemon and every step process do) takes a couple of seconds.
"""

from __future__ import annotations

import dagster as dg

from batch_assets.gate.checks import BaselineResource, transcripts_checks
from batch_assets.gpu.assets import gpu_section
from batch_assets.gpu.resources import GpuResource
from batch_assets.ingest.assets import fetched_audio, prepared_flights
from batch_assets.storage import StorageResource

all_assets = [fetched_audio, prepared_flights, gpu_section]

transcribe_partition_job = dg.define_asset_job(
    "transcribe_partition",
    selection=dg.AssetSelection.assets(*all_assets),  # includes the checks on transcripts
    description="Fetch, prepare, and run the GPU section for one daily partition.",
)

defs = dg.Definitions(
    assets=all_assets,
    asset_checks=transcripts_checks,
    jobs=[transcribe_partition_job],
    resources={"storage": StorageResource(), "gpu": GpuResource(), "baseline": BaselineResource()},
)
