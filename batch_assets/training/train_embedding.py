"""The tiny diarization pipeline's speaker embedding and PLDA, trained on the synthetic speakers (CPU).

Steps 2 and 3 of `train_diarization.py`: `TinyXVector` trained with an additive-margin softmax on 2 s crops;
then centring + LDA + a two-covariance PLDA fitted on the training speakers' embeddings, written in the
two-file format pyannote's VBx clustering loads. The equal error rate on held-out speakers is the check.
"""

from __future__ import annotations

import pathlib
import time

import numpy as np
import torch
import torch.nn.functional as F

from batch_assets.training.corpus import RATE


# -- speaker embedding -----------------------------------------------------------------------------
def crop(clip: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    if len(clip) >= samples:
        start = int(rng.integers(0, len(clip) - samples + 1))
        return clip[start : start + samples]
    return np.pad(clip, (0, samples - len(clip)))


def train_embedding(pool, names, minutes: float, rng, dimension: int = 64, batch: int = 64):
    from pyannote.audio.core.task import Problem, Resolution, Specifications

    from batch_assets.models.tiny_embedding import TinyXVector

    model = TinyXVector(dimension=dimension)
    model.specifications = Specifications(problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK, duration=3.0,
                                          min_duration=0.5)
    head = torch.nn.Parameter(torch.randn(len(names), dimension) * 0.01)
    optimizer = torch.optim.Adam(list(model.parameters()) + [head], lr=2e-3)
    scale, margin = 30.0, 0.2
    started, step = time.time(), 0
    model.train()
    while time.time() - started < minutes * 60:
        labels = rng.integers(0, len(names), size=batch)
        x = np.stack([crop(pool[names[k]][int(rng.integers(len(pool[names[k]])))], 2 * RATE, rng) for k in labels])
        x = x * rng.uniform(0.3, 1.0, size=(batch, 1)) + rng.normal(0, rng.uniform(0.0005, 0.005), size=x.shape)
        emb = F.normalize(model(torch.from_numpy(x.astype(np.float32))[:, None, :]), dim=-1)
        cos = emb @ F.normalize(head, dim=-1).T
        target = torch.from_numpy(labels)
        logits = scale * (cos - margin * F.one_hot(target, len(names)))
        loss = F.cross_entropy(logits, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % 100 == 0:
            acc = (cos.argmax(-1) == target).float().mean().item()
            print(f"embedding step {step} loss {loss.item():.3f} acc {acc:.2f} ({time.time() - started:.0f} s)",
                  flush=True)
    return model.eval(), step


def embed(model, clips: list[np.ndarray]) -> np.ndarray:
    with torch.no_grad():
        return np.concatenate([model(torch.from_numpy(c[None, None, :].astype(np.float32))).numpy() for c in clips])


def equal_error_rate(emb: np.ndarray, labels: np.ndarray) -> float:
    e = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    scores = e @ e.T
    same = labels[:, None] == labels[None, :]
    iu = np.triu_indices(len(labels), 1)
    s, y = scores[iu], same[iu]
    thresholds = np.quantile(s, np.linspace(0, 1, 400))
    far = np.array([(s[~y] >= t).mean() for t in thresholds])
    frr = np.array([(s[y] < t).mean() for t in thresholds])
    i = int(np.argmin(np.abs(far - frr)))
    return float((far[i] + frr[i]) / 2)


# -- PLDA ------------------------------------------------------------------------------------------
def l2(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def fit_plda(emb: np.ndarray, labels: np.ndarray, lda_dim: int, folder: pathlib.Path) -> None:
    """Centre, LDA, then a two-covariance PLDA, in the files pyannote's `vbx_setup` reads."""
    from scipy.linalg import eigh

    D = emb.shape[1]
    mean1 = emb.mean(axis=0)
    x = np.sqrt(D) * l2(emb - mean1)
    classes = np.unique(labels)
    mu = x.mean(axis=0)
    Sw = sum(np.cov((x[labels == c] - x[labels == c].mean(0)).T, bias=True) * (labels == c).sum()
             for c in classes) / len(x)
    Sb = sum(np.outer(x[labels == c].mean(0) - mu, x[labels == c].mean(0) - mu) for c in classes) / len(classes)
    vals, vecs = eigh(Sb, Sw + 1e-6 * np.eye(D))
    lda = vecs[:, ::-1][:, :lda_dim]
    y = x @ lda
    mean2 = y.mean(axis=0)
    z = np.sqrt(lda_dim) * l2(y - mean2)
    plda_mu = z.mean(axis=0)
    zc = z - plda_mu
    W = sum(np.cov((zc[labels == c] - zc[labels == c].mean(0)).T, bias=True) * (labels == c).sum()
            for c in classes) / len(zc)
    B = np.cov(np.stack([zc[labels == c].mean(0) for c in classes]).T, bias=True)
    psi, V = eigh(B, W + 1e-6 * np.eye(lda_dim))  # V.T W V = I, V.T B V = diag(psi)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "xvec_transform.npz", mean1=mean1, mean2=mean2, lda=lda)
    np.savez(folder / "plda.npz", mu=plda_mu, tr=V.T, psi=np.maximum(psi, 1e-6))
