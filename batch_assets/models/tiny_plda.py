"""A local PLDA in the two-file format pyannote's VBx clustering loads (`xvec_transform.npz`, `plda.npz`).

Built from config: centring at zero, identity LDA and an isotropic PLDA (between-class variance
`between_class` times the within-class one). It is the neutral PLDA for an embedding space that has
not been fitted yet; a PLDA fitted on labelled embeddings writes the same two files.
"""

from __future__ import annotations

import pathlib

import numpy as np


def write_plda(directory: pathlib.Path, dimension: int, between_class: float = 2.0) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    np.savez(
        directory / "xvec_transform.npz",
        mean1=np.zeros(dimension),
        mean2=np.zeros(dimension),
        lda=np.eye(dimension),
    )
    np.savez(
        directory / "plda.npz",
        mu=np.zeros(dimension),
        tr=np.eye(dimension),
        psi=np.full(dimension, between_class),
    )
    return directory
