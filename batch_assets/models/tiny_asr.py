"""The tiny NeMo TDT model: a FastConformer-TDT transducer with a character vocabulary, built from config.

It has the production model's structure (mel front end, Conformer encoder with 8x depthwise-striding
subsampling, LSTM prediction network, joint with 5 TDT duration outputs, greedy-batch TDT decoding) at
about 0.2 M parameters, so every NeMo code path the pipeline uses (transcribe with word timestamps,
decoding strategy and CUDA-graph settings) is exercised without a download.
"""

from __future__ import annotations

from typing import Any

TDT_DURATIONS = [0, 1, 2, 3, 4]
LABELS = [" ", *"abcdefghijklmnopqrstuvwxyz", "'"]
D_MODEL = 64


def tiny_tdt_config() -> dict[str, Any]:
    return {
        "sample_rate": 16000,
        "labels": LABELS,
        "model_defaults": {
            "enc_hidden": D_MODEL,
            "pred_hidden": D_MODEL,
            "joint_hidden": D_MODEL,
            "tdt_durations": TDT_DURATIONS,
            "num_tdt_durations": len(TDT_DURATIONS),
        },
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
            "sample_rate": 16000,
            "normalize": "per_feature",
            "window_size": 0.025,
            "window_stride": 0.01,
            "window": "hann",
            "features": 64,
            "n_fft": 512,
            "frame_splicing": 1,
            "dither": 0.0,
            "pad_to": 0,
        },
        "encoder": {
            "_target_": "nemo.collections.asr.modules.ConformerEncoder",
            "feat_in": 64,
            "feat_out": -1,
            "n_layers": 2,
            "d_model": D_MODEL,
            "subsampling": "dw_striding",
            "subsampling_factor": 8,
            "subsampling_conv_channels": 64,
            "ff_expansion_factor": 2,
            "self_attention_model": "rel_pos",
            "n_heads": 4,
            "att_context_size": [-1, -1],
            "xscaling": True,
            "untie_biases": True,
            "pos_emb_max_len": 5000,
            "conv_kernel_size": 9,
            "conv_norm_type": "batch_norm",
            "dropout": 0.0,
            "dropout_pre_encoder": 0.0,
            "dropout_emb": 0.0,
            "dropout_att": 0.0,
        },
        "decoder": {
            "_target_": "nemo.collections.asr.modules.RNNTDecoder",
            "normalization_mode": None,
            "random_state_sampling": False,
            "blank_as_pad": True,
            "prednet": {"pred_hidden": D_MODEL, "pred_rnn_layers": 1, "t_max": None, "dropout": 0.0},
        },
        "joint": {
            "_target_": "nemo.collections.asr.modules.RNNTJoint",
            "log_softmax": None,
            "preserve_memory": False,
            "fuse_loss_wer": False,
            "fused_batch_size": 4,
            "jointnet": {"joint_hidden": D_MODEL, "activation": "relu", "dropout": 0.0},
            "num_extra_outputs": len(TDT_DURATIONS),
        },
        "decoding": {
            "strategy": "greedy_batch",
            "model_type": "tdt",
            "durations": TDT_DURATIONS,
            "greedy": {"max_symbols": 10, "use_cuda_graph_decoder": True},
        },
        "loss": {
            "loss_name": "tdt",
            "tdt_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0, "durations": TDT_DURATIONS, "sigma": 0.02,
                           "omega": 0.1},
        },
        "train_ds": None,
        "validation_ds": None,
        "test_ds": None,
        "optim": {"name": "adamw", "lr": 1e-3},
    }


def build_tiny_tdt(seed: int):
    import torch
    from nemo.collections.asr.models import EncDecRNNTModel
    from omegaconf import OmegaConf

    torch.manual_seed(seed)
    model = EncDecRNNTModel(cfg=OmegaConf.create(tiny_tdt_config()))
    return model.eval()
