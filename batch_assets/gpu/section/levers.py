"""The section's levers for one run, typed: what `run_section` and the section's stages read. No Dagster.

Its own module so that the runner and the section both read it without importing each other; the run config
(`gpu/steps/run_config.py: LeverConfig`) and the switch registry (`batch_assets/switches.py`) name the same fields.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Levers:
    """The section's switches and settings for one run (run config, defaults from the environment)."""

    prepare_flight_enabled: bool = True
    vad_segmentation_reuse_enabled: bool = True
    asr_cuda_graphs_enabled: bool = True
    embedding_shared_trunk_enabled: bool = True
    batch_across_units_enabled: bool = True
    host_overlap_enabled: bool = True
    half_precision_enabled: bool = False
    tf32_enabled: bool = False
    embedding_trunk_blocks_enabled: bool = False
    embedding_skip_covered_enabled: bool = False
    channel_reading_enabled: bool = True
    decode_budget_seconds: float = 1800.0
    prepare_workers: int = 2
    fetch_workers: int = 8
    asr_batch_size: int = 0  # 0: the device's (`transcribe.batch_size_for`)

    @property
    def unit_fetch_workers(self) -> int:
        """A flight's units fetched and decoded at once (`FlightSource.load`): `fetch_workers` with lever 1, else one
        after another (the serial baseline)."""
        return self.fetch_workers if self.prepare_flight_enabled else 1

    def embedding_options(self) -> dict[str, bool]:
        """What a diarization call's embedding step reads (`pipeline.DiarizationCall`)."""
        return {"shared_trunk": self.embedding_shared_trunk_enabled, "half_precision": self.half_precision_enabled,
                "trunk_blocks": self.embedding_trunk_blocks_enabled,
                "skip_covered": self.embedding_skip_covered_enabled}
