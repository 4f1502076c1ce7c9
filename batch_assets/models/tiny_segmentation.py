"""The tiny powerset segmentation model: a PyanNet shaped like segmentation-3.0, but small.

Same problem shape as production (3 local speakers, at most 2 at once, i.e. 7 powerset classes), so the
diarization pipeline treats it exactly like the real thing; the shipped model uses 5 s chunks (its
checkpoint carries the specification). A purely random PyanNet predicts one constant class everywhere,
so the shipped default is this architecture trained on synthetic dialogues by
`batch_assets.training.train_diarization` (weights in `weights/segmentation.bin`).
"""

from __future__ import annotations

from pyannote.audio.core.task import Problem, Resolution, Specifications
from pyannote.audio.models.segmentation import PyanNet

CHUNK_DURATION_S = 10.0
LOCAL_SPEAKERS = 3
POWERSET_MAX = 2

ARCHITECTURE = {
    "sincnet": {"stride": 10},
    "lstm": {"hidden_size": 64, "num_layers": 2, "bidirectional": True, "monolithic": True, "dropout": 0.0},
    "linear": {"hidden_size": 64, "num_layers": 2},
}


def specifications(duration: float = CHUNK_DURATION_S) -> Specifications:
    return Specifications(
        problem=Problem.MONO_LABEL_CLASSIFICATION,
        resolution=Resolution.FRAME,
        duration=duration,
        min_duration=duration,
        warm_up=(0.0, 0.0),
        classes=[f"speaker#{i + 1}" for i in range(LOCAL_SPEAKERS)],
        powerset_max_classes=POWERSET_MAX,
        permutation_invariant=True,
    )


def build_segmentation(duration: float = CHUNK_DURATION_S, architecture: dict | None = None) -> PyanNet:
    """A powerset PyanNet with this problem shape; `architecture` (PyanNet's sincnet/lstm/linear) defaults to the
    tiny one."""
    model = PyanNet(sample_rate=16000, num_channels=1, **(architecture or ARCHITECTURE))
    model.specifications = specifications(duration)
    model.build()
    return model
