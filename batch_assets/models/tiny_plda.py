"""A local PLDA in the two-file format pyannote's VBx clustering loads (`xvec_transform.npz`, `plda.npz`).

Built from config: centring at zero, an LDA (identity; or, to `lda_dimension` < `dimension`, a seeded
random orthonormal projection, the shape of community-1's 256 -> 128) and an isotropic PLDA
(between-class variance `between_class` times the within-class one). It is the neutral PLDA for an
embedding space that has not been fitted yet; a PLDA fitted on labelled embeddings writes the same files.
"""

from __future__ import annotations

import pathlib

import numpy as np


def write_plda(directory: pathlib.Path, dimension: int, between_class: float = 2.0, lda_dimension: int | None = None,
               rng: np.random.Generator | None = None) -> pathlib.Path:
    directory.mkdir(parents=True, exist_ok=True)
    lda_dimension = lda_dimension or dimension
    if lda_dimension == dimension:
        lda = np.eye(dimension)
    else:
        lda = np.linalg.qr((rng or np.random.default_rng(0)).standard_normal((dimension, lda_dimension)))[0]
    np.savez(
        directory / "xvec_transform.npz",
        mean1=np.zeros(dimension),
        mean2=np.zeros(lda_dimension),
        lda=lda,
    )
    np.savez(
        directory / "plda.npz",
        mu=np.zeros(lda_dimension),
        tr=np.eye(lda_dimension),
        psi=np.full(lda_dimension, between_class),
    )
    return directory
