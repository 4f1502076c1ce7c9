"""Language identification on real NeMo models: the builtin LID on voices and sentences it never heard, AmberNet's
layout loaded by path through the loader (the production path, on a model built from its config), and what LID
hears (the VAD regions, not the silence or noise around them)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from batch_assets.gpu.asr.language_id import LID_SPEECH_S, MIN_SPEECH_S, SAMPLE_RATE, identify, labels_of, speech_sample
from batch_assets.models.langid_config import (
    BUILTIN_LANGUAGES,
    VOXLINGUA107,
    build_langid,
    langid_config,
    save_ambernet_shaped,
)
from batch_assets.models.languages import TINY_LANGID
from batch_assets.models.loaders import load_language_id_model
from batch_assets.models.sentences import make_sentences
from batch_assets.training.corpus import VOICES, synthesize

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def held_out() -> dict[str, list[np.ndarray]]:
    """Four sentences per language the builtin LID never trained on, in voices it never heard."""
    return {language: [u.audio for u in synthesize(
        make_sentences(4, np.random.default_rng(90 + i), vocabulary=2000, lengths=(5, 12), language=language),
        list(VOICES[language].held_out), seed=900 + i)] for i, language in enumerate(BUILTIN_LANGUAGES)}


def _whole(audio: np.ndarray) -> np.ndarray:
    return speech_sample(audio, [(0.0, len(audio) / SAMPLE_RATE)])


def test_the_builtin_lid_names_the_language_of_held_out_speech(held_out):
    model = load_language_id_model(TINY_LANGID, CPU)
    assert labels_of(model) == list(BUILTIN_LANGUAGES)
    for language, utterances in held_out.items():
        found = [identify(model, CPU, _whole(audio)) for audio in utterances]
        right = [f for f in found if f.language == language]
        assert len(right) >= 3, (language, found)  # the trained model: 4 of 4 (docs/languages.md)
        assert all(0.5 < f.confidence <= 1.0 for f in right), found


def test_ambernet_by_path_through_the_loader(tmp_path, held_out):
    """AmberNet's class and layout (107 VoxLingua107 labels in `cfg.train_ds.labels`), saved as a .nemo and loaded
    as production loads `langid_ambernet`: a NeMo upgrade that moves the labels or changes `forward`'s outputs
    fails here."""
    model = load_language_id_model(str(save_ambernet_shaped(tmp_path / "ambernet.nemo")), CPU)
    assert labels_of(model) == list(VOXLINGUA107) and len(VOXLINGUA107) == 107
    found = identify(model, CPU, _whole(held_out["es"][0]))
    assert found.language in VOXLINGUA107 and 0.0 < found.confidence <= 1.0
    unlabelled = build_langid(langid_config(("en", "es")))
    unlabelled.cfg.train_ds.labels = ["en"]  # one label for two classes
    unlabelled.save_to(str(tmp_path / "unlabelled.nemo"))
    with pytest.raises(ValueError, match=r"no language labels for its 2 classes.*BATCH_ASSETS_LANGUAGE_ID_MODEL"):
        load_language_id_model(str(tmp_path / "unlabelled.nemo"), CPU)


def test_lid_hears_the_speech_regions_only(held_out):
    model = load_language_id_model(TINY_LANGID, CPU)
    speech = held_out["de"][0]
    noise = np.random.default_rng(0).normal(0.0, 0.3, size=3 * SAMPLE_RATE).astype(np.float32)  # loud, not speech
    recording = np.concatenate([noise, speech, noise])
    regions = [(3.0, 3.0 + len(speech) / SAMPLE_RATE)]
    sample = speech_sample(recording, regions)
    assert np.array_equal(sample, speech[:len(sample)]) and len(sample) >= len(speech) - 1
    assert identify(model, CPU, sample) == identify(model, CPU, _whole(speech))
    long = speech_sample(np.tile(speech, 20), [(0.0, 20 * len(speech) / SAMPLE_RATE)])
    assert len(long) == int(LID_SPEECH_S * SAMPLE_RATE)  # the first LID_SPEECH_S seconds only
    short = speech_sample(speech, [(0.0, 0.1)])
    assert len(short) >= MIN_SPEECH_S * SAMPLE_RATE and np.array_equal(short[:1600], speech[:1600])
