"""The FastConformer-TDT configuration and the BPE tokenizer the builtin ASR models are built from. NeMo-free.

`model_config` is the `EncDecRNNTBPEModel` config of the tiny trained model (`training/train_asr.py`), which
the production-shaped model (`production_shaped.py`) scales to parakeet-tdt-0.6b-v2's sizes; `train_tokenizer`
trains the SentencePiece BPE tokenizer both use. Kept under `models/` so that building a model never imports
the training code.
"""

from __future__ import annotations

import pathlib

DURATIONS = [0, 1, 2, 3, 4]


def model_config(tokenizer_dir: str, d_model: int = 96, layers: int = 4) -> dict:
    return {
        "sample_rate": 16000,
        "tokenizer": {"dir": tokenizer_dir, "type": "bpe"},
        "model_defaults": {"enc_hidden": d_model, "pred_hidden": 128, "joint_hidden": 128,
                           "tdt_durations": DURATIONS, "num_tdt_durations": len(DURATIONS)},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor", "sample_rate": 16000,
            "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01, "window": "hann",
            "features": 64, "n_fft": 512, "frame_splicing": 1, "dither": 1e-5, "pad_to": 0,
        },
        "spec_augment": {"_target_": "nemo.collections.asr.modules.SpectrogramAugmentation",
                         "freq_masks": 2, "time_masks": 2, "freq_width": 12, "time_width": 0.05},
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder", "feat_in": 64, "feat_out": -1,
            "n_layers": layers, "d_model": d_model, "subsampling": "dw_striding", "subsampling_factor": 8,
            "subsampling_conv_channels": 96, "ff_expansion_factor": 4, "self_attention_model": "rel_pos",
            "n_heads": 4, "att_context_size": [-1, -1], "xscaling": True, "untie_biases": True,
            "pos_emb_max_len": 5000, "conv_kernel_size": 9, "conv_norm_type": "batch_norm",
            "dropout": 0.1, "dropout_pre_encoder": 0.1, "dropout_emb": 0.0, "dropout_att": 0.1,
        },
        "decoder": {"_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
                    "random_state_sampling": False, "blank_as_pad": True,
                    "prednet": {"pred_hidden": 128, "pred_rnn_layers": 1, "t_max": None, "dropout": 0.1}},
        "joint": {"_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None, "preserve_memory": False,
                  "fuse_loss_wer": False, "fused_batch_size": 4,
                  "jointnet": {"joint_hidden": 128, "activation": "relu", "dropout": 0.1},
                  "num_extra_outputs": len(DURATIONS)},
        "decoding": {"strategy": "greedy_batch", "model_type": "tdt", "durations": DURATIONS,
                     "greedy": {"max_symbols": 10, "use_cuda_graph_decoder": True}},
        "loss": {"loss_name": "tdt", "tdt_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0, "durations": DURATIONS,
                                                    "sigma": 0.02, "omega": 0.1}},
        "train_ds": None, "validation_ds": None, "test_ds": None,
        "optim": {"name": "adamw", "lr": 1e-3},
    }


def train_tokenizer(sentences: list[str], folder: pathlib.Path, vocab: int) -> None:
    import sentencepiece as spm

    text = folder / "text.txt"
    text.write_text("\n".join(sentences) + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / "tokenizer"), vocab_size=vocab,
                                   model_type="bpe", character_coverage=1.0, bos_id=-1, eos_id=-1,
                                   num_threads=1)
    (folder / "vocab.txt").write_text("\n".join(
        line.split("\t")[0] for line in (folder / "tokenizer.vocab").read_text().splitlines()) + "\n")
