"""Lever 4, the shared embedding trunk, on real pyannote pipelines: the tiny builtin (x-vector) and the
production-shaped one (WeSpeaker ResNet34, VBx + PLDA of community-1's shape), against stock pyannote."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile as sf
import torch

from batch_assets.gpu import pyannote_adapter as adapter
from batch_assets.gpu.diarization import DiarizationCall, diarization_file, diarize, make_levered
from batch_assets.gpu.shared_trunk import SHARED_TRUNK, STOCK_SWITCHED_OFF
from batch_assets.gpu.vad import as_pyannote_file
from batch_assets.models import builtin
from batch_assets.models.loaders import load_diarization_pipeline
from batch_assets.models.production_shaped import COMMUNITY1_SHAPED
from batch_assets.storage.resource import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_data" / "audio" / "2026-01-15"
CPU = torch.device("cpu")


def speech(name: str, seconds: float) -> np.ndarray:
    from batch_assets.audio.decode import to_target

    samples, rate = sf.read(SAMPLE / name, dtype="float32", always_2d=True)
    return to_target(samples, rate)[: int(16000 * seconds)]


@pytest.fixture(scope="module")
def tiny():
    return make_levered(load_diarization_pipeline(builtin.TINY_DIARIZATION, CPU, 32, 32))


@pytest.fixture(scope="module")
def production_shaped():
    return make_levered(load_diarization_pipeline(COMMUNITY1_SHAPED, CPU, 32, 32))


def both_ways(pipeline, waveform):
    """The same unit diarized with the stock embedding step and with the shared trunk."""
    return [diarize(pipeline, waveform, "u", None, shared_trunk=shared) for shared in (False, True)]


def pair_embeddings(pipeline, waveform):
    """Every (chunk, local speaker) embedding both ways, with the binarized segmentation they came from."""
    segmentations = pipeline.get_segmentations(as_pyannote_file(waveform, "u"))
    out = []
    for shared in (False, True):
        file = diarization_file(waveform, "u", DiarizationCall(shared_trunk=shared))
        out.append(pipeline.get_embeddings(file, segmentations, exclude_overlap=pipeline.embedding_exclude_overlap))
    return segmentations, out


def assert_same_diarization(stock, shared):
    assert shared.turns == stock.turns and len(stock.turns) > 0
    assert shared.exclusive_turns == stock.exclusive_turns
    assert list(shared.embeddings) == list(stock.embeddings)  # the same speaker labels, in order


@pytest.fixture(scope="module")
def tiny_both_ways(tiny) -> dict:
    """Three sample files' first 45 s diarized both ways by the tiny pipeline (two tests read them)."""
    names = ("meetings/standup.wav", "calls/2026/interview.ogg", "meetings/planning.mp3")
    return {name: both_ways(tiny, speech(name, 45)) for name in names}


def test_tiny_shared_trunk_gives_stock_turns_labels_and_embeddings(tiny_both_ways):
    for stock, shared in tiny_both_ways.values():
        assert stock.embedding_work.path == STOCK_SWITCHED_OFF and shared.embedding_work.path == SHARED_TRUNK
        assert_same_diarization(stock, shared)
        for label in stock.embeddings:
            # bitwise on these files; the trunk's tail batch (fewer chunks than stock's last pairs) may move a
            # last float bit on other files with this model (measured 1.2e-7 on support_call.flac)
            np.testing.assert_allclose(shared.embeddings[label], stock.embeddings[label], rtol=0, atol=1e-6)


def test_tiny_pair_embeddings_inactive_pairs_are_exactly_stock(tiny):
    segmentations, (stock, shared) = pair_embeddings(tiny, speech("calls/2026/support_call.flac", 42))
    inactive = np.sum(segmentations.data, axis=1) == 0
    assert 0 < inactive.sum() < inactive.size
    assert np.array_equal(shared[inactive], stock[inactive])  # zero statistics through the head, as stock pools them
    np.testing.assert_allclose(shared, stock, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_production_shaped_shared_trunk_gives_stock_turns_labels_and_embeddings(production_shaped):
    waveform = speech("meetings/planning.mp3", 20)
    stock, shared = both_ways(production_shaped, waveform)
    assert_same_diarization(stock, shared)
    for label in stock.embeddings:
        # WeSpeaker ResNet34 on this CPU: bitwise on 5 s chunks; on segmentation-3.0's 10 s chunks 97 % of the pairs
        # are bitwise and the rest move in their last bits (measured: pairs 1.2e-7, centroids 7.5e-9)
        np.testing.assert_allclose(shared.embeddings[label], stock.embeddings[label], rtol=0, atol=1e-6)
    _, (stock_pairs, shared_pairs) = pair_embeddings(production_shaped, waveform)
    np.testing.assert_allclose(shared_pairs, stock_pairs, rtol=0, atol=1e-5)
    work = shared.embedding_work
    assert work.trunk_forwards <= work.chunks and work.pooled_pairs == work.active_pairs < work.pairs
    assert stock.embedding_work.trunk_forwards == stock.embedding_work.pairs == 3 * stock.embedding_work.chunks


def test_trunk_runs_at_most_once_per_chunk_and_pools_only_active_pairs(tiny_both_ways):
    stock, shared = tiny_both_ways["meetings/standup.wav"]
    s, w = stock.embedding_work, shared.embedding_work
    assert s.chunks == w.chunks > 0 and s.pairs == w.pairs == 3 * w.chunks
    assert s.trunk_forwards == s.pooled_pairs == s.pairs  # measured by a forward hook on the model: one per pair
    assert 0 < w.trunk_forwards <= w.chunks  # one per chunk with an active speaker
    assert w.pooled_pairs == w.active_pairs == s.active_pairs < w.pairs


def test_each_model_splits_into_trunk_and_pooling_bitwise():
    from pyannote.audio.models.embedding import WeSpeakerResNet34

    from batch_assets.models.tiny_embedding import TinyXVector

    torch.manual_seed(0)
    waveforms = torch.randn(4, 1, 16000 * 3) * 0.1
    weights = (torch.rand(4, 100) > 0.4).float()
    for model in (TinyXVector().eval(), WeSpeakerResNet34().eval()):
        with torch.inference_mode():
            whole = model(waveforms, weights=weights)
            split = model.forward_embedding(model.forward_frames(waveforms), weights=weights)
        assert torch.equal(whole, split), type(model).__name__


def test_a_model_without_the_split_falls_back_to_stock_with_the_reason(tiny, tmp_path):
    from pyannote.audio.core.task import Problem, Resolution, Specifications
    from pyannote.audio.models.embedding import XVectorMFCC

    from batch_assets.models.pyannote_checkpoint import save_checkpoint

    folder = tmp_path / "xvector-pipeline"
    shutil.copytree(builtin.tiny_diarization_path(), folder)
    torch.manual_seed(0)
    embedding = XVectorMFCC(dimension=builtin.EMBEDDING_DIMENSION).eval()  # pyannote's own x-vector: no split
    embedding.specifications = Specifications(problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK, duration=3.0)
    save_checkpoint(embedding, folder / "embedding" / "pytorch_model.bin")
    pipeline = make_levered(load_diarization_pipeline(str(folder), CPU, 32, 32))
    assert type(adapter.embedding_model(pipeline)).__name__ == "XVectorMFCC"
    stock, fallback = both_ways(pipeline, speech("meetings/standup.wav", 20))
    assert fallback.embedding_work.path == "stock (fallback: XVectorMFCC has no forward_frames or forward_embedding)"
    assert fallback.embedding_work.trunk_forwards == fallback.embedding_work.pairs  # the stock work, counted
    assert_same_diarization(stock, fallback)
    for label in stock.embeddings:
        assert np.array_equal(fallback.embeddings[label], stock.embeddings[label])
