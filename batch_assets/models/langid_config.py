"""Language identification models built from config: NeMo's `EncDecSpeakerLabelModel`, AmberNet's class.

NeMo's `langid_ambernet` is an `EncDecSpeakerLabelModel` (a mel front end, a `ConvASREncoder` of depth-wise
separable 1-D convolutions with squeeze-and-excitation, a `SpeakerDecoder` pooling over time into one logit per
language) whose labels, in `cfg.train_ds.labels`, are language codes. The builtin LID (`builtin:tiny-langid`) is
the same class at a small size, trained here on synthetic speech (`training/train_langid.py`), so that the
loader and the section run one code path for both. `ambernet_shaped` builds AmberNet's layout (its published
size: 80 mels, 1-D separable blocks with SE, attentive pooling, 107 VoxLingua107 labels) with random weights, for
the tests of the production path (nothing can be downloaded here).
"""

from __future__ import annotations

import pathlib

LANGID_SEED = 20261203
BUILTIN_LANGUAGES = ("en", "es", "de", "ja")
# VoxLingua107's languages as AmberNet labels them (ISO 639-1 where one exists; a few three-letter codes)
VOXLINGUA107 = tuple("""ab af am ar as az ba be bg bn bo br bs ca ceb cs cy da de el en eo es et eu fa fi fo fr gl gn
gu gv ha haw hi hr ht hu hy ia id is it iw ja jw ka kk km kn ko la lb ln lo lt lv mg mi mk ml mn mr ms mt my ne nl nn
no oc pa pl ps pt ro ru sa sco sd si sk sl sn so sq sr su sv sw ta te tg th tk tl tr tt uk ur uz vi war yi yo
zh""".split())


def _block(filters: int, repeat: int, kernel: int, residual: bool) -> dict:
    return {"filters": filters, "repeat": repeat, "kernel": [kernel], "stride": [1], "dilation": [1],
            "dropout": 0.0, "residual": residual, "separable": True, "se": True, "se_context_size": -1}


def langid_config(labels: tuple[str, ...], mels: int = 64, filters: int = 128, blocks: int = 3, repeat: int = 1,
                  final: int = 256, emb: int = 64, pool: str = "xvector") -> dict:
    """An `EncDecSpeakerLabelModel` config with one class per label (a language code), labels kept in train_ds."""
    jasper = [_block(filters, 1, 3, False)]
    jasper += [_block(filters, repeat, k, True) for k in (7, 11, 15, 19, 23)[:blocks]]
    jasper += [_block(final, 1, 1, False)]
    return {
        "sample_rate": 16000,
        "train_ds": {"manifest_filepath": None, "sample_rate": 16000, "labels": list(labels), "batch_size": 32,
                     "shuffle": False},
        "preprocessor": {"_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
                         "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01, "sample_rate": 16000,
                         "window": "hann", "features": mels, "n_fft": 512, "frame_splicing": 1, "dither": 0.0},
        "encoder": {"_target_": "nemo.collections.asr.modules.ConvASREncoder", "feat_in": mels, "activation": "relu",
                    "conv_mask": True, "jasper": jasper},
        "decoder": {"_target_": "nemo.collections.asr.modules.SpeakerDecoder", "feat_in": final,
                    "num_classes": len(labels), "pool_mode": pool, "emb_sizes": [emb]},
        "loss": {"_target_": "nemo.collections.common.losses.cross_entropy.CrossEntropyLoss"},
    }


def build_langid(config: dict, seed: int = LANGID_SEED):
    """The model of `config`, seeded, in eval mode."""
    import torch
    from nemo.collections.asr.models import EncDecSpeakerLabelModel
    from omegaconf import OmegaConf, open_dict

    from batch_assets.models.environment import quiet_model_libraries

    quiet_model_libraries()
    torch.manual_seed(seed)
    model = EncDecSpeakerLabelModel(cfg=OmegaConf.create(config))
    cfg = model.cfg  # set-up without a manifest replaced the labels with none: the labels are ours
    with open_dict(cfg):
        cfg.train_ds.labels = list(config["train_ds"]["labels"])
    model.cfg = cfg
    return model.eval()


def builtin_config() -> dict:
    return langid_config(BUILTIN_LANGUAGES)


def ambernet_shaped_config() -> dict:
    """AmberNet's layout: 80 mels, separable SE blocks of 512 channels x3 repeats, attentive pooling, 107 labels."""
    return langid_config(VOXLINGUA107, mels=80, filters=512, blocks=3, repeat=3, final=1536, emb=192,
                         pool="attention")


def save_ambernet_shaped(path: pathlib.Path) -> pathlib.Path:
    build_langid(ambernet_shaped_config()).save_to(str(path))
    return path
