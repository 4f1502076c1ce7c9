"""What every embedding path is: `EmbeddingPath`, the requests it takes and the work it counts.

Diarization's embedding step gives each (chunk, local speaker) pair of a unit an embedding. Several paths compute
it (`stock.py`, `shared_trunk.py`, `trunk_blocks.py`, `skip_covered.py`); each is one `EmbeddingPath`, and
`choice.embedding_path` is the one place a call's levers pick it. A path takes one or several units' requests
(several when lever 5 batches a flight's units and the path `batches_units`), returns each one's (chunks, local
speakers, dimension) embeddings, and counts what it ran in the request's `EmbeddingWork`, whose `path` is what the
`embedding_path` column and the run's `embedding_paths` metadata show.
"""

from __future__ import annotations

import abc
import dataclasses

import numpy as np


@dataclasses.dataclass
class EmbeddingWork:
    """What one call's embedding step ran: trunk forwards (waveforms through the network's trunk; stock runs
    one per pair) and pooled pairs (statistics pooling + head), out of `chunks` x local speakers `pairs`."""

    path: str = "not run"
    chunks: int = 0
    pairs: int = 0
    active_pairs: int = 0  # pairs whose pooling weights are not all zero
    trunk_forwards: int = 0
    pooled_pairs: int = 0
    trunk_seconds: float = 0.0  # audio seconds through the trunk (the per-chunk paths: forwards x chunk duration)
    copied_pairs: int = 0  # approximate lever B: active pairs given a neighbour pair's embedding, not pooled

    def counts(self) -> dict[str, float]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "path"}


@dataclasses.dataclass
class EmbeddingRequest:
    """One unit's embedding step: its pyannote file, its binarized segmentations ((chunks, frames, local speakers)
    `SlidingWindowFeature`) and the work counted for it."""

    file: dict
    binarized: object
    work: EmbeddingWork = dataclasses.field(default_factory=EmbeddingWork)

    def __post_init__(self) -> None:
        num_chunks, _, num_speakers = self.binarized.data.shape
        self.work.chunks, self.work.pairs = num_chunks, num_chunks * num_speakers


class EmbeddingPath(abc.ABC):
    """One way to compute the embedding step. Each path says `batches_units`: whether one call may take several
    units' requests (lever 5 then hands it all of a flight's, to share forwards across them where the path can)."""

    batches_units: bool

    @abc.abstractmethod
    def name(self, across_units: bool) -> str:
        """The path as the tables and the metadata name it; `across_units`: the requests shared forwards."""

    @abc.abstractmethod
    def embed(self, pipeline, requests: list[EmbeddingRequest], exclude_overlap: bool, across_units: bool = False,
              hook=None, skip: list[np.ndarray] | None = None) -> list[np.ndarray]:
        """Each request's (chunks, local speakers, dimension) embeddings, its work counted in `request.work` (its
        `path` included). `skip`: per request, a (chunks, local speakers) mask of the pairs this path need not
        compute (another path gives them: `skip_covered.py`); `hook`: pyannote's progress hook."""
