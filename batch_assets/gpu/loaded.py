"""The models a GPU worker holds, with no Dagster dependency (so device checks can use it bare)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class LoadedModels:
    device: object
    asr: object
    diarization: object  # ReusingSpeakerDiarization
    load_seconds: float
    segmentation_forwards: list[int]  # a counter the forward hook increments
    decoder_settings: dict | None = None  # what this process last applied to the ASR decoder
