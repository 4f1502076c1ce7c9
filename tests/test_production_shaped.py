"""The production-shaped models are the production architectures at production sizes, and run through our code."""

from __future__ import annotations

import pytest
import torch

from batch_assets.models import production_shaped as shaped

CPU = torch.device("cpu")


@pytest.mark.slow
def test_parakeet_shaped_has_parakeet_tdt_0_6b_v2_sizes_and_transcribes_through_our_asr_path():
    from batch_assets.gpu.asr.transcribe import Segment, transcribe_segments
    from batch_assets.models.loaders import load_asr_model

    from .test_embedding_trunk import speech

    model = load_asr_model(shaped.PARAKEET_SHAPED, CPU)
    assert type(model).__name__ == "EncDecRNNTBPEModel" and not model.training
    assert 0.60e9 < sum(p.numel() for p in model.parameters()) < 0.64e9
    encoder = model.encoder
    assert (len(encoder.layers), encoder.d_model, encoder._feat_in) == (24, 1024, 128)
    assert model.tokenizer.vocab_size == shaped.VOCABULARY
    assert list(model.cfg.decoding.durations) == [0, 1, 2, 3, 4]
    assert model.decoder.pred_hidden == 640 and model.decoder.pred_rnn_layers == 2
    waveform = speech("meetings/standup.wav", 8)
    words = transcribe_segments(model, {"u": waveform}, [Segment("u", 0.0, 8.0)], batch_size=1)
    assert words and all(0.0 <= w.start_s <= w.end_s <= 8.0 for w in words)
    again = transcribe_segments(model, {"u": waveform}, [Segment("u", 0.0, 8.0)], batch_size=1)
    assert again == words  # seeded weights, deterministic decoding


def test_each_shaped_asr_model_has_its_production_models_tokenizer_size_and_heads():
    """v2 (1024 pieces), v3 (8192, trained on English, Spanish and German) and the Japanese hybrid (3072 kana
    pieces, 80 mel features, an auxiliary CTC head) from one config builder; the models themselves are built by the
    slow tests (`test_japanese.py` for the hybrid) and the benches."""
    import re

    for name, shape in shaped.SHAPED_ASR.items():
        folder = shaped._tokenizer_dir(shape)
        pieces = (folder / "vocab.txt").read_text().split()
        assert len(pieces) == shape.vocabulary, name
        config = shaped.parakeet_shaped_config(str(folder), shape)
        assert config["preprocessor"]["features"] == config["encoder"]["feat_in"] == shape.features
        assert ("aux_ctc" in config) == (shape.ctc_loss_weight is not None)
    ja = shaped.SHAPED_ASR[shaped.PARAKEET_JA_SHAPED]
    assert (ja.features, ja.vocabulary, ja.ctc_loss_weight) == (80, 3072, 0.3)
    kana = re.compile(r"^\u2581?[\u3041-\u309f\u30a0-\u30ff]+$")
    pieces = (shaped._tokenizer_dir(ja) / "vocab.txt").read_text().split()[1:]  # after <unk>
    assert all(kana.match(p) or p == "\u2581" for p in pieces)
    config = shaped.parakeet_shaped_config("t", ja)["aux_ctc"]
    assert config["decoder"]["_target_"].endswith("ConvASRDecoder") and config["decoder"]["feat_in"] == 1024


def test_community1_shaped_is_laid_out_like_community_1():
    from batch_assets.gpu.adapters import pyannote_adapter as adapter
    from batch_assets.models.loaders import load_diarization_pipeline

    pipeline = load_diarization_pipeline(shaped.COMMUNITY1_SHAPED, CPU, 32, 32)
    model = adapter.embedding_model(pipeline)
    assert type(model).__name__ == "WeSpeakerResNet34" and model.dimension == shaped.EMBEDDING_DIMENSION
    assert 6.5e6 < sum(p.numel() for p in model.parameters()) < 6.8e6
    assert type(pipeline.clustering).__name__ == "VBxClustering" and pipeline.embedding_exclude_overlap
    assert pipeline.clustering.plda(torch.zeros(2, 256).numpy() + 0.1).shape == (2, shaped.LDA_DIMENSION)
    assert (pipeline.clustering.threshold, pipeline.clustering.Fa, pipeline.clustering.Fb) == (0.6, 0.07, 0.8)


def test_community1_shaped_segments_with_segmentation_3_0s_network_on_10_s_chunks():
    from batch_assets.gpu.adapters import pyannote_adapter as adapter
    from batch_assets.models.loaders import load_diarization_pipeline

    pipeline = load_diarization_pipeline(shaped.COMMUNITY1_SHAPED, CPU, 32, 32)
    inference = adapter.segmentation_inference(pipeline)
    model = inference.model
    assert type(model).__name__ == "PyanNet" and 1.46e6 < sum(p.numel() for p in model.parameters()) < 1.48e6
    lstm = model.hparams.lstm
    assert (lstm["hidden_size"], lstm["num_layers"], lstm["bidirectional"]) == (128, 4, True)
    assert model.hparams.linear == {"hidden_size": 128, "num_layers": 2}
    assert model.specifications.duration == inference.duration == shaped.SEGMENTATION_CHUNK_S
    assert inference.step == pytest.approx(1.0)  # community-1's step: a tenth of a chunk
    assert model.num_frames(160000) == 589 and model.specifications.powerset
    # trained, not random: speech and silence get different decisions
    from .test_embedding_trunk import speech

    scores = inference({"waveform": torch.from_numpy(speech("meetings/standup.wav", 20))[None], "sample_rate": 16000,
                        "uri": "u"})
    assert 0.2 < float((scores.data.max(axis=-1) > 0).mean()) < 1.0
