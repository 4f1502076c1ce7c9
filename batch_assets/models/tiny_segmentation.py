"""The tiny powerset segmentation model: a PyanNet shaped like segmentation-3.0, but small.

Same problem specification as production (10 s chunks, 3 local speakers, at most 2 at once, i.e. 7
powerset classes), so the diarization pipeline treats it exactly like the real thing. A purely random
PyanNet predicts one constant class everywhere, so the shipped default is this architecture fitted
briefly on synthetic speech by `scripts/fit_segmentation.py` (weights in `weights/segmentation.bin`).
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


def specifications() -> Specifications:
    return Specifications(
        problem=Problem.MONO_LABEL_CLASSIFICATION,
        resolution=Resolution.FRAME,
        duration=CHUNK_DURATION_S,
        min_duration=CHUNK_DURATION_S,
        warm_up=(0.0, 0.0),
        classes=[f"speaker#{i + 1}" for i in range(LOCAL_SPEAKERS)],
        powerset_max_classes=POWERSET_MAX,
        permutation_invariant=True,
    )


def build_segmentation() -> PyanNet:
    model = PyanNet(sample_rate=16000, num_channels=1, **ARCHITECTURE)
    model.specifications = specifications()
    model.build()
    return model
