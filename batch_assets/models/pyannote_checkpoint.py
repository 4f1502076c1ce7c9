"""Write pyannote models as the same `pytorch_model.bin` checkpoints the hub serves.

`Model.from_pretrained(path)` then loads our tiny models through exactly the code path that loads
production checkpoints (architecture, specifications and hyper-parameters read from the file).
"""

from __future__ import annotations

import pathlib

import lightning
import torch


def save_checkpoint(model, path: pathlib.Path) -> pathlib.Path:
    checkpoint = {
        "state_dict": model.state_dict(),
        "hyper_parameters": dict(model.hparams),
        "pytorch-lightning_version": lightning.__version__,
    }
    model.on_save_checkpoint(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, path)
    return path
