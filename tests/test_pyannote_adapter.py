"""The one module that reaches into pyannote's private attributes fails loudly when pyannote changes under it."""

from __future__ import annotations

from importlib.metadata import version

import pytest
import torch

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.models import builtin
from batch_assets.models.loaders import load_diarization_pipeline


def test_pyannote_is_the_version_the_adapter_was_checked_against():
    assert version("pyannote.audio") == adapter.PYANNOTE_CHECKED, (
        f"pyannote.audio {version('pyannote.audio')} is installed; batch_assets/gpu/adapters/pyannote_adapter.py "
        f"and the levers in gpu/diarization/ were checked against {adapter.PYANNOTE_CHECKED}: re-check them, then "
        "update PYANNOTE_CHECKED and STOCK_SOURCES"
    )


@pytest.mark.parametrize("qualname", sorted(adapter.STOCK_SOURCES))
def test_the_stock_methods_the_levers_stand_in_for_are_unchanged(qualname):
    assert adapter.stock_source_digest(qualname) == adapter.STOCK_SOURCES[qualname], (
        f"pyannote's {qualname} changed: compare it with LeveredSpeakerDiarization (gpu/diarization/pipeline.py), "
        "which re-implements or wraps it, then update STOCK_SOURCES in gpu/adapters/pyannote_adapter.py"
    )


def test_every_private_reach_resolves_on_a_loaded_pipeline():
    from pyannote.audio.core.inference import Inference
    from pyannote.core import Segment

    pipeline = load_diarization_pipeline(builtin.TINY_DIARIZATION, torch.device("cpu"), 32, 32)
    assert isinstance(adapter.segmentation_inference(pipeline), Inference)
    assert isinstance(adapter.embedding_model(pipeline), torch.nn.Module)
    assert adapter.embedding_inference(pipeline).sample_rate == 16000
    file = {"waveform": torch.zeros(1, 16000), "sample_rate": 16000, "uri": "u"}
    assert adapter.crop(pipeline, file, Segment(0.5, 2.5)).shape == (1, 32000)  # padded past the end, as stock
