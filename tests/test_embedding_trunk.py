"""Lever 4, the shared embedding trunk, on real pyannote pipelines: the tiny builtin (x-vector) and the
production-shaped one (WeSpeaker ResNet34, VBx + PLDA of community-1's shape), against stock pyannote."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile as sf
import torch

from batch_assets.gpu.adapters import pyannote_adapter as adapter
from batch_assets.gpu.diarization.embeddings.shared_trunk import SHARED_TRUNK
from batch_assets.gpu.diarization.embeddings.skip_covered import NOT_COPIED, covered_sources, fill_copies, frame_shift
from batch_assets.gpu.diarization.embeddings.stock import STOCK_SWITCHED_OFF
from batch_assets.gpu.diarization.pipeline import (
    DiarizationCall,
    PrecomputedEmbeddings,
    diarization_file,
    diarize,
    make_levered,
)
from batch_assets.gpu.diarization.vad import as_pyannote_file
from batch_assets.models import builtin
from batch_assets.models.loaders import load_diarization_pipeline
from batch_assets.models.production_shaped import COMMUNITY1_SHAPED
from batch_assets.storage.resource import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_data" / "audio" / "2026-01-15"
CPU = torch.device("cpu")


def speech(name: str, seconds: float) -> np.ndarray:
    from batch_assets.source.decode import to_target

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


def pair_embeddings(pipeline, waveform, ways=({"shared_trunk": False}, {"shared_trunk": True})):
    """Every (chunk, local speaker) embedding each way (`DiarizationCall` options), with the segmentation they came
    from and each way's work."""
    segmentations = pipeline.get_segmentations(as_pyannote_file(waveform, "u"))
    out, works = [], []
    for options in ways:
        call = DiarizationCall(**options)
        file = diarization_file(waveform, "u", call)
        out.append(pipeline.get_embeddings(file, segmentations, exclude_overlap=pipeline.embedding_exclude_overlap))
        works.append(call.embedding_work)
    return segmentations, out, works


def diarize_given(pipeline, waveform, segmentations, embeddings, work):
    """A unit's diarization with its segmentation and pair embeddings already computed (no forward runs)."""
    exclude = pipeline.embedding_exclude_overlap
    binarized = adapter.binarized_segmentations(pipeline, segmentations)
    call = DiarizationCall(segmentations=segmentations,
                           embeddings=PrecomputedEmbeddings(binarized.data, exclude, embeddings, work))
    return diarize(pipeline, waveform, "u", call=call)


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
    segmentations, (stock, shared), _ = pair_embeddings(tiny, speech("calls/2026/support_call.flac", 42))
    inactive = np.sum(segmentations.data, axis=1) == 0
    assert 0 < inactive.sum() < inactive.size
    assert np.array_equal(shared[inactive], stock[inactive])  # zero statistics through the head, as stock pools them
    np.testing.assert_allclose(shared, stock, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_production_shaped_shared_trunk_gives_stock_turns_labels_and_embeddings(production_shaped):
    """Stock, the shared trunk and lever A's trunk blocks over one segmentation (each forward run once: the turns
    come from the pair embeddings, given to the calls)."""
    waveform = speech("meetings/planning.mp3", 15)  # 6 chunks of 10 s
    segmentations, (stock_pairs, shared_pairs, block_pairs), (s, w, b) = pair_embeddings(
        production_shaped, waveform, ({"shared_trunk": False}, {"shared_trunk": True}, {"trunk_blocks": True}))
    # WeSpeaker ResNet34 on this CPU: bitwise on 5 s chunks; on segmentation-3.0's 10 s chunks 97 % of the pairs
    # are bitwise and the rest move in their last bits (measured: pairs 1.2e-7, centroids 7.5e-9)
    np.testing.assert_allclose(shared_pairs, stock_pairs, rtol=0, atol=1e-5)
    stock, shared = (diarize_given(production_shaped, waveform, segmentations, pairs, work)
                     for pairs, work in ((stock_pairs, s), (shared_pairs, w)))
    assert_same_diarization(stock, shared)
    for label in stock.embeddings:
        np.testing.assert_allclose(shared.embeddings[label], stock.embeddings[label], rtol=0, atol=1e-6)
    assert w.trunk_forwards <= w.chunks and w.pooled_pairs == w.active_pairs < w.pairs
    assert s.trunk_forwards == s.pairs == 3 * s.chunks and s.trunk_seconds == 10.0 * s.pairs
    # lever A: the 15 s once through the trunk, not 10 s per chunk; each active pair pooled from the frames where
    # its chunk's own would be (a frame moved by one would not keep every pair this close)
    assert b.path == "trunk blocks (approximate)" and (b.trunk_forwards, b.trunk_seconds) == (1, 15.0)
    assert w.trunk_seconds == 10.0 * w.trunk_forwards >= 50.0 and b.pooled_pairs == w.pooled_pairs
    active = pooled_mask(production_shaped, segmentations)
    cosine = np.sum(block_pairs * shared_pairs, -1) / np.linalg.norm(block_pairs, axis=-1) / np.linalg.norm(
        shared_pairs, axis=-1)
    assert active.sum() == w.active_pairs and cosine[active].min() > 0.98, cosine[active].min()


def pooled_mask(pipeline, segmentations) -> np.ndarray:
    """(chunks, speakers): the pairs pooled (their weights not all zero)."""
    from batch_assets.gpu.diarization.embeddings.pooling import pooling_weights

    num_chunks, _, num_speakers = segmentations.data.shape
    weights = pooling_weights(pipeline, segmentations, pipeline.embedding_exclude_overlap)
    return weights.any(axis=1).reshape(num_chunks, num_speakers)


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


def test_covered_pairs_are_a_speaker_talking_on_and_nothing_else():
    """Lever B's rule on a made-up segmentation (7 chunks of 100 frames, a step of 10 frames, 3 local speakers)."""
    data = np.zeros((7, 100, 3))
    data[:, :, 0] = 1  # speaker 0 talks through every chunk
    data[3, 85:, 1] = data[4, 75:90, 2] = 1  # a voice entering at the end of chunk 3: chunk 4's speaker 2
    data[5, 40:60, 1] = 1  # a short turn no neighbour has as a speaker of its own
    active = data.any(axis=1)
    sources = covered_sources(data, active, frame_shift=10)
    copied = {(int(c), int(k)): int(sources[c, k]) for c, k in zip(*np.nonzero(sources != NOT_COPIED), strict=True)}
    # odd chunks only (their neighbours are embedded), each from the neighbour that covers it, never the last chunk
    assert copied == {(1, 0): 0 * 3 + 0, (3, 0): 2 * 3 + 0, (5, 0): 4 * 3 + 0, (3, 1): 4 * 3 + 2}
    embeddings = np.arange(7 * 3 * 2, dtype=np.float32).reshape(7, 3, 2)
    assert fill_copies(embeddings, sources) == 4
    assert np.array_equal(embeddings[3, 1], embeddings[4, 2]) and np.array_equal(embeddings[5, 0], embeddings[4, 0])
    assert np.array_equal(embeddings[5, 1], [32.0, 33.0])  # not covered: its own


def test_lever_b_gives_covered_pairs_their_neighbours_embedding_and_skips_covered_chunks(tiny):
    waveform = speech("meetings/standup.wav", 45)
    segmentations, (shared, covered), (w, c) = pair_embeddings(
        tiny, waveform, ({"shared_trunk": True}, {"skip_covered": True}))
    binarized = adapter.binarized_segmentations(tiny, segmentations)
    sources = covered_sources(binarized.data, pooled_mask(tiny, binarized),
                              frame_shift(binarized, adapter.segmentation_inference(tiny).model.receptive_field.step))
    copied = sources != NOT_COPIED
    assert c.path == "shared trunk, covered pairs copied (approximate)" and c.copied_pairs == copied.sum() > 0
    assert c.pooled_pairs + c.copied_pairs == w.pooled_pairs and c.trunk_forwards < w.trunk_forwards
    flat = covered.reshape(-1, covered.shape[-1])
    assert np.array_equal(covered[copied], flat[sources[copied]])  # the neighbour's own embedding
    np.testing.assert_allclose(covered[~copied], shared[~copied], rtol=0, atol=1e-6)  # the rest: as the exact path


def test_trunk_blocks_stitch_one_frame_sequence_on_the_units_clock(tiny):
    """A unit longer than a block: blocks with context either side, their frames joined, are the frames of one
    forward over the whole unit, once nothing is normalised per input (the x-vector's MFCC floors its decibels at
    80 dB under its input's loudest bin: with the floor, each block's own; it is taken away here, and put back)."""
    from batch_assets.gpu.diarization.embeddings.interface import EmbeddingWork
    from batch_assets.gpu.diarization.embeddings.trunk_blocks import BLOCK_S, CONTEXT_S, unit_frames

    torch.manual_seed(0)
    noise = torch.randn(1, 16000 * 130) * 0.1
    work, decibels = EmbeddingWork(), adapter.embedding_model(tiny).mfcc.amplitude_to_DB
    decibels.top_db = None
    try:
        frames = unit_frames(tiny, noise, False, work)
        with torch.inference_mode():
            whole = adapter.embedding_model(tiny).forward_frames(noise[None])
    finally:
        decibels.top_db = 80.0
    assert frames.shape == whole.shape
    assert work.trunk_forwards == 3 and work.trunk_seconds == pytest.approx(130 + 4 * CONTEXT_S)
    assert BLOCK_S == 60.0
    np.testing.assert_allclose(frames.numpy(), whole.numpy(), rtol=0, atol=1e-4)
