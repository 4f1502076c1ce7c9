"""The GPU section's parts on real (tiny) models: VAD exactness, score reuse, decoder modes, quarantine."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import soundfile as sf

from batch_assets.gpu.adapters.pyannote_adapter import segmentation_inference
from batch_assets.gpu.asr.transcribe import (
    CONFIDENCE_SETTING,
    DecoderModeError,
    apply_decoder_mode,
    check_decoder_mode,
    observe_decoder,
)
from batch_assets.gpu.diarization.pipeline import diarize
from batch_assets.gpu.diarization.vad import as_pyannote_file, run_vad
from batch_assets.gpu.steps import resources as gpu_resources
from batch_assets.gpu.steps.resources import GpuResource
from batch_assets.storage.resource import REPO_ROOT

from .conftest import make_resources, materialize_partition

SPEECH = REPO_ROOT / "sample_data" / "audio" / "2026-01-15" / "meetings" / "standup.wav"


@pytest.fixture(scope="module")
def models(lock_dir):
    return GpuResource(device="cpu", lock_dir=str(lock_dir)).models


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    audio, rate = sf.read(SPEECH, dtype="float32")
    assert rate == 16000
    return audio[: 16000 * 30]


def test_vad_regions_are_exactly_pyannotes_voice_activity_detection(models, speech):
    from pyannote.audio.pipelines import VoiceActivityDetection

    inference = segmentation_inference(models.diarization)
    reference = VoiceActivityDetection(segmentation=inference.model, batch_size=inference.batch_size)
    reference.instantiate({"min_duration_on": 0.0, "min_duration_off": 0.0})
    expected = [(s.start, s.end) for s in reference(as_pyannote_file(speech, "u")).get_timeline().support()]
    ours = run_vad(models.diarization, speech, "u").regions
    assert len(ours) == len(expected) > 0
    np.testing.assert_allclose(np.array(ours), np.array(expected), atol=1e-6)


def test_vad_scores_are_bitwise_the_scores_diarization_would_compute(models, speech):
    vad = run_vad(models.diarization, speech, "u")
    fresh = models.diarization.get_segmentations(as_pyannote_file(speech, "u"))
    assert np.array_equal(vad.scores.data, fresh.data)
    assert vad.scores.sliding_window.duration == fresh.sliding_window.duration
    assert vad.scores.sliding_window.step == fresh.sliding_window.step


def test_reuse_is_identical_consumed_once_and_falls_back_on_mismatch(models, speech):
    from pyannote.core import SlidingWindowFeature

    pipeline = models.diarization
    vad = run_vad(pipeline, speech, "u")
    before = models.segmentation_forwards[0]
    reused = diarize(pipeline, speech, "u", vad.scores)
    assert reused.reuse == "reused" and models.segmentation_forwards[0] == before
    fresh = diarize(pipeline, speech, "u", None)  # nothing offered: the earlier offer was consumed
    assert fresh.reuse == "not offered" and models.segmentation_forwards[0] > before
    assert reused.turns == fresh.turns and reused.exclusive_turns == fresh.exclusive_turns
    assert reused.embeddings.keys() == fresh.embeddings.keys()
    for label in fresh.embeddings:
        assert np.array_equal(reused.embeddings[label], fresh.embeddings[label])
    wrong = SlidingWindowFeature(vad.scores.data[:, ::2, :], vad.scores.sliding_window)  # half the frames
    fallback = diarize(pipeline, speech, "u", wrong)
    assert fallback.reuse.startswith("fallback:") and "frames" in fallback.reuse
    assert fallback.turns == fresh.turns


def test_decoder_mode_checks_on_cpu(models):
    asr, device = models.asr, models.device
    settings = apply_decoder_mode(asr, True, None)
    assert settings == {"strategy": "greedy_batch", "head": "transducer", "use_cuda_graph_decoder": True,
                        "word_confidence": True, "confidence": CONFIDENCE_SETTING}
    assert check_decoder_mode(asr, device, True, "before") == "eager (cuda graphs unavailable on cpu)"
    with pytest.raises(DecoderModeError, match="use_cuda_graph_decoder is True, run asked for False"):
        check_decoder_mode(asr, device, False, "before")
    settings = apply_decoder_mode(asr, False, settings)
    assert observe_decoder(asr, device).computer_mode is None
    assert check_decoder_mode(asr, device, False, "after") == "eager"
    models.decoder_settings[models.default_asr_name] = settings


def test_word_confidence_is_a_score_per_word_and_off_changes_nothing_else(models, speech):
    from batch_assets.gpu.asr.transcribe import Segment, transcribe_segments

    segments = [Segment("u", 0.5, 8.0), Segment("u", 8.0, 16.0)]
    apply_decoder_mode(models.asr, False, None, word_confidence=False)
    plain = transcribe_segments(models.asr, {"u": speech}, segments, 4)
    apply_decoder_mode(models.asr, False, None, word_confidence=True)
    scored = transcribe_segments(models.asr, {"u": speech}, segments, 4)
    models.decoder_settings.pop(models.default_asr_name, None)  # as a fresh worker's
    assert (len(plain) > 10
            and [(w.start_s, w.end_s, w.word) for w in plain] == [(w.start_s, w.end_s, w.word) for w in scored])
    assert all(w.score is None for w in plain) and all(0.0 <= w.score <= 1.0 for w in scored)


@pytest.mark.e2e
def test_decoder_changed_behind_the_sections_back_quarantines_the_worker(models, tmp_path, lock_dir):
    resources = make_resources(tmp_path, lock_dir)
    assert materialize_partition(resources).success  # graphs on (default): settings applied by this process
    decoding = copy.deepcopy(models.asr.cfg.decoding)
    decoding.greedy.use_cuda_graph_decoder = False
    models.asr.change_decoding_strategy(decoding, verbose=False)  # a real NeMo call, not by the section
    try:
        failed = materialize_partition(resources, raise_on_error=False)
        assert not failed.success
        failure = next(e for e in failed.all_events if e.event_type_value == "STEP_FAILURE")
        message = str(failure.event_specific_data.error)
        assert "quarantined" in message and "expected" in message and "actual" in message
        assert gpu_resources.quarantine_reason() is not None
        refused = materialize_partition(resources, raise_on_error=False)
        assert not refused.success
        errors = " ".join(str(e.event_specific_data.error) for e in refused.all_events
                          if e.event_type_value == "STEP_FAILURE")
        assert "refuses GPU work" in errors
    finally:
        gpu_resources._QUARANTINE.clear()  # this test process goes on; a real worker would be replaced
        models.decoder_settings[models.default_asr_name] = apply_decoder_mode(models.asr, True, None)
