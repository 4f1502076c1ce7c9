"""A small x-vector speaker-embedding model that plugs into pyannote as is.

pyannote's XVectorMFCC hard-codes 512/1500-channel TDNN layers (about 4.6 M parameters, ~10 s per audio
minute of embeddings on these CPUs). This keeps its MFCC front end, its frame arithmetic and its masked
statistics pooling (which the diarization pipeline relies on), with configurable, much narrower layers.
Like pyannote's WeSpeaker ResNets it splits into `forward_frames` (MFCC + TDNN trunk) and
`forward_embedding(frames, weights)` (pooling + head, weights per speaker allowed), so diarization can
run the trunk once per chunk (the shared-trunk lever); `forward` is XVectorMFCC's, the same operations.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from pyannote.audio.core.model import Model
from pyannote.audio.models.blocks.pooling import StatsPool
from pyannote.audio.models.embedding.xvector import XVectorMFCC
from pyannote.audio.utils.params import merge_dict
from torchaudio.transforms import MFCC


class TinyXVector(Model):
    MFCC_DEFAULTS = XVectorMFCC.MFCC_DEFAULTS

    def __init__(
        self,
        sample_rate: int = 16000,
        num_channels: int = 1,
        mfcc: dict | None = None,
        channels: tuple[int, ...] = (64, 64, 64, 64, 128),
        dimension: int = 64,
        task=None,
    ):
        super().__init__(sample_rate=sample_rate, num_channels=num_channels, task=task)
        mfcc = merge_dict(self.MFCC_DEFAULTS, mfcc)
        mfcc["sample_rate"] = sample_rate
        channels = list(channels)
        self.save_hyperparameters("mfcc", "channels", "dimension")
        self.mfcc = MFCC(**self.hparams.mfcc)
        self.kernel_size = [5, 3, 3, 1, 1]
        self.dilation = [1, 2, 3, 1, 1]
        self.padding = [0, 0, 0, 0, 0]
        self.stride = [1, 1, 1, 1, 1]
        self.tdnns = nn.ModuleList()
        in_channel = self.hparams.mfcc["n_mfcc"]
        for out_channel, kernel_size, dilation in zip(channels, self.kernel_size, self.dilation, strict=True):
            self.tdnns.extend(
                [
                    nn.Conv1d(in_channel, out_channel, kernel_size=kernel_size, dilation=dilation),
                    nn.LeakyReLU(),
                    nn.BatchNorm1d(out_channel),
                ]
            )
            in_channel = out_channel
        self.stats_pool = StatsPool()
        self.embedding = nn.Linear(in_channel * 2, self.hparams.dimension)

    # Frame arithmetic, receptive field and masked-pooling forward are XVectorMFCC's own.
    dimension = XVectorMFCC.dimension
    num_frames = XVectorMFCC.num_frames
    receptive_field_size = XVectorMFCC.receptive_field_size
    receptive_field_center = XVectorMFCC.receptive_field_center
    forward = XVectorMFCC.forward

    def forward_frames(self, waveforms: torch.Tensor) -> torch.Tensor:
        """(batch, channel, sample) waveforms -> (batch, features, frames) trunk outputs."""
        outputs = self.mfcc(waveforms).squeeze(dim=1)
        for block in self.tdnns:
            outputs = block(outputs)
        return outputs

    def forward_embedding(self, frames: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """Trunk outputs and (batch, frames) or (batch, speakers, frames) weights -> embeddings."""
        return self.embedding(self.stats_pool(frames, weights=weights))
