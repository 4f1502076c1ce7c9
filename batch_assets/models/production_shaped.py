"""Production-shaped models: the production architectures at production sizes, built from config, no download.

The tiny builtins make every code path run, but their stage costs look nothing like production's (a
67 k-parameter x-vector, a 1 M-parameter TDT), so a bench on them cannot say what a lever is worth on the
models users run. These names can be given wherever a model name goes (`BATCH_ASSETS_ASR_MODEL`,
`BATCH_ASSETS_ASR_MODELS`, `BATCH_ASSETS_DIARIZATION_PIPELINE`, the bench's `--models production-shaped`):

- `builtin:parakeet-tdt-0.6b-v2-shaped`: NeMo `EncDecRNNTBPEModel`, FastConformer-TDT with
  nvidia/parakeet-tdt-0.6b-v2's sizes (128 mel features, 8x depthwise-striding subsampling with 256
  channels, 24 Conformer layers of d_model 1024, 8 heads, feed-forward x4, kernel 9; LSTM prediction
  network 2 x 640; joint 640; SentencePiece BPE vocabulary of 1024; TDT durations 0-4; greedy batch
  decoding, at most 10 symbols per frame): 618 M parameters, seeded random weights. The decoder's cost
  scales with the tokens emitted: these random weights emit one token every third encoder frame (4.2
  tokens per audio second, measured on the sample speech), about what a trained model emits on speech,
  so no output bias needs adjusting.
- `builtin:parakeet-tdt-0.6b-v3-shaped`: the same network with v3's vocabulary of 8192 pieces (its tokenizer
  trained here on English, Spanish and German sentences; v3's covers 25 languages): 627 M parameters. Its random
  duration head would emit ten tokens every frame: its duration-0 logit is lowered (`ShapedAsr.duration0_bias`),
  so it emits 5.6 tokens per audio second.
- `builtin:parakeet-tdt_ctc-0.6b-ja-shaped`: NeMo `EncDecHybridRNNTCTCBPEModel`, nvidia/parakeet-tdt_ctc-0.6b-ja's
  published config: the same encoder on 80 mel features, the TDT head as above, and an auxiliary CTC head
  (`ConvASRDecoder`, CTC loss weight 0.3) over a SentencePiece vocabulary of 3072 pieces (trained here on
  Japanese kana sentences; the published one also holds kanji). The section decodes with the TDT head
  (`gpu/asr/transcribe.py`), as the published model does by default.
- `builtin:community-1-shaped`: a pyannote pipeline folder laid out like
  pyannote/speaker-diarization-community-1 (`SpeakerDiarization`, VBx clustering with its parameters,
  `embedding_exclude_overlap`, batch sizes 32): the embedding model is pyannote's `WeSpeakerResNet34`
  (6.6 M parameters, 256-dimensional, seeded random weights); the PLDA is community-1's shape (a
  256 -> 128 LDA, seeded random orthonormal, and a neutral 128-dimensional PLDA). The segmentation model
  is the one trained part: segmentation-3.0's PyanNet (`SEGMENTATION_ARCHITECTURE`, 1.47 M parameters) on
  community-1's 10 s chunks, trained here on the synthetic dialogues (`weights/segmentation-3.0-shaped.bin`,
  `python -m batch_assets.training.train_diarization --production-shaped-segmentation`). A PyanNet with
  random weights predicts one powerset class everywhere, i.e. every frame speech by the same single
  speaker or no speech at all, and every downstream cost (which units are silent, how many chunks have
  1, 2 or 3 active speakers, hence how many embeddings the clustering uses) follows from those decisions.

Builds are seeded and cached like the tiny builtins (`builtin.py`); the 0.6 B-parameter ASR models are
built in memory on each load (seconds), not written to 2.4 GB `.nemo` files. Their tokenizers are trained on
the training corpus's generated sentences, which need the `dev` extras (`wordfreq`; `make setup` installs
them): these are bench and test models, not something a production image needs.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil

from batch_assets.models.names import COMMUNITY1_SHAPED, PARAKEET_SHAPED  # noqa: F401 (named here too)

PARAKEET_V3_SHAPED = "builtin:parakeet-tdt-0.6b-v3-shaped"
PARAKEET_JA_SHAPED = "builtin:parakeet-tdt_ctc-0.6b-ja-shaped"
SHAPED_SEED = 20260601
EMBEDDING_DIMENSION = 256
LDA_DIMENSION = 128
VOCABULARY = 1024


@dataclasses.dataclass(frozen=True)
class ShapedAsr:
    """What sets one production ASR model's shape apart from parakeet-tdt-0.6b-v2's (`PARAKEET_SIZES`)."""

    features: int  # mel features
    vocabulary: int  # SentencePiece pieces
    languages: tuple[str, ...]  # whose generated sentences train the tokenizer
    ctc_loss_weight: float | None = None  # a hybrid TDT-CTC model's auxiliary CTC head (None: TDT only)
    # added to the joint's duration-0 logit: seeded random weights whose duration head favours 0 emit ten tokens a
    # frame (NeMo's max_symbols), 125 a second, which no trained model does; lowered, the decoder advances as
    # v2-shaped's does (measured on 20 s of the sample's speech: v2-shaped 4.2 tokens a second, v3-shaped 5.6 with
    # -2, the same with -5 or -20; ja-shaped 6.25 as built)
    duration0_bias: float = 0.0


SHAPED_ASR = {
    PARAKEET_SHAPED: ShapedAsr(features=128, vocabulary=VOCABULARY, languages=("en",)),
    PARAKEET_V3_SHAPED: ShapedAsr(features=128, vocabulary=8192, languages=("en", "es", "de"), duration0_bias=-2.0),
    PARAKEET_JA_SHAPED: ShapedAsr(features=80, vocabulary=3072, languages=("ja",), ctc_loss_weight=0.3),
}

# segmentation-3.0's PyanNet (1.47 M parameters, 589 frames per 10 s chunk); LSTM dropout only regularises
# training (0.5 there), so it is 0.0 here, where training is short: the inference network is the same
SEGMENTATION_ARCHITECTURE = {
    "sincnet": {"stride": 10},
    "lstm": {"hidden_size": 128, "num_layers": 4, "bidirectional": True, "monolithic": True, "dropout": 0.0},
    "linear": {"hidden_size": 128, "num_layers": 2},
}
SEGMENTATION_CHUNK_S = 10.0  # community-1's chunks; its step is a tenth of a chunk (the pipeline's segmentation_step)
SEGMENTATION_WEIGHTS = pathlib.Path(__file__).resolve().parent / "weights" / "segmentation-3.0-shaped.bin"
SEGMENTATION_REPORT = SEGMENTATION_WEIGHTS.with_suffix(".json")

PARAKEET_SIZES = {
    "features": 128, "d_model": 1024, "layers": 24, "heads": 8, "ff_expansion": 4, "subsampling_channels": 256,
    "pred_hidden": 640, "pred_layers": 2, "joint_hidden": 640,
}
COMMUNITY1_PARAMS = {"segmentation": {"min_duration_off": 0.0}, "clustering": {"threshold": 0.6, "Fa": 0.07, "Fb": 0.8}}


def parakeet_shaped_config(tokenizer_dir: str, shape: ShapedAsr = SHAPED_ASR[PARAKEET_SHAPED]) -> dict:
    from batch_assets.models.tdt_config import model_config

    s = PARAKEET_SIZES
    config = model_config(tokenizer_dir, d_model=s["d_model"], layers=s["layers"])
    config["model_defaults"] |= {"pred_hidden": s["pred_hidden"], "joint_hidden": s["joint_hidden"]}
    config["preprocessor"] |= {"features": shape.features}
    config["encoder"] |= {"feat_in": shape.features, "n_heads": s["heads"], "ff_expansion_factor": s["ff_expansion"],
                          "subsampling_conv_channels": s["subsampling_channels"]}
    config["decoder"]["prednet"] |= {"pred_hidden": s["pred_hidden"], "pred_rnn_layers": s["pred_layers"]}
    config["joint"]["jointnet"] |= {"joint_hidden": s["joint_hidden"]}
    if shape.ctc_loss_weight is not None:  # parakeet-tdt_ctc's aux_ctc section (its classes set from the tokenizer)
        config["aux_ctc"] = {
            "ctc_loss_weight": shape.ctc_loss_weight, "use_cer": True, "ctc_reduction": "mean_volume",
            "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": s["d_model"],
                        "num_classes": -1, "vocabulary": []},
            "decoding": {"strategy": "greedy", "greedy": {}},
        }
    return config


def _tokenizer_dir(shape: ShapedAsr) -> pathlib.Path:
    from batch_assets.models.builtin import cached_build, fingerprint

    def build(folder: pathlib.Path) -> None:
        import numpy as np

        from batch_assets.models.languages import written
        from batch_assets.models.sentences import make_sentences
        from batch_assets.models.tdt_config import train_tokenizer

        sentences = [written(sentence, language) for language in shape.languages
                     for sentence in make_sentences(6000, np.random.default_rng(SHAPED_SEED), language=language)]
        train_tokenizer(sentences, folder, shape.vocabulary)

    key = fingerprint(shape.vocabulary, SHAPED_SEED, list(shape.languages), "bpe-v2")
    return cached_build(f"bpe-{shape.vocabulary}-{'-'.join(shape.languages)}", key, build)


def build_asr_shaped(name: str, seed: int = SHAPED_SEED):
    """A production-shaped ASR model (`SHAPED_ASR`), in eval mode on the CPU, seeded random weights."""
    import torch
    from nemo.collections.asr.models import EncDecHybridRNNTCTCBPEModel, EncDecRNNTBPEModel
    from omegaconf import OmegaConf

    shape = SHAPED_ASR[name]
    model_class = EncDecRNNTBPEModel if shape.ctc_loss_weight is None else EncDecHybridRNNTCTCBPEModel
    torch.manual_seed(seed)
    model = model_class(cfg=OmegaConf.create(parakeet_shaped_config(str(_tokenizer_dir(shape)), shape)))
    if shape.duration0_bias:  # the joint's last layer: the tokens' logits, then the durations' (0 first)
        with torch.no_grad():
            model.joint.joint_net[-1].bias[-model.joint.num_extra_outputs] += shape.duration0_bias
    return model.eval()


def community1_shaped_path() -> pathlib.Path:
    from batch_assets.models import builtin

    def build(folder: pathlib.Path) -> None:
        import numpy as np
        import torch
        from pyannote.audio.models.embedding import WeSpeakerResNet34

        from batch_assets.models.tiny_plda import write_plda

        (folder / "segmentation").mkdir()
        shutil.copyfile(SEGMENTATION_WEIGHTS, folder / "segmentation" / "pytorch_model.bin")
        torch.manual_seed(SHAPED_SEED)
        builtin.save_embedding(WeSpeakerResNet34(), folder, duration=10.0)
        write_plda(folder / "plda", EMBEDDING_DIMENSION, lda_dimension=LDA_DIMENSION,
                   rng=np.random.default_rng(SHAPED_SEED))
        builtin.write_pipeline_config(folder, COMMUNITY1_PARAMS, segmentation_batch_size=32, embedding_batch_size=32)

    if not SEGMENTATION_WEIGHTS.exists():
        raise FileNotFoundError(f"{SEGMENTATION_WEIGHTS} is missing: it ships with the repository (train it with "
                                "`python -m batch_assets.training.train_diarization --production-shaped-segmentation`)")
    key = builtin.fingerprint(SEGMENTATION_WEIGHTS, SEGMENTATION_ARCHITECTURE, COMMUNITY1_PARAMS,
                              EMBEDDING_DIMENSION, LDA_DIMENSION, SHAPED_SEED, "community-1-shaped-v3")
    return builtin.cached_build("community-1-shaped", key, build)
