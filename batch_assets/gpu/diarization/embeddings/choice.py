"""The one place a diarization call's levers pick its embedding path (`interface.EmbeddingPath`).

Lever 4 (`shared_trunk`) and the approximate levers A (`trunk_blocks`) and B (`skip_covered`) each ask for a path
that splits the model into trunk and pooling: B wraps A's trunk blocks when A is on, else the shared trunk. A model
that does not split (`pooling.split_problem`), or a pipeline in training mode, takes the stock path instead, the
reason in the path's name; with all three off, stock is taken as switched off. A new path is one file beside these and
one line here.
"""

from __future__ import annotations

from typing import Protocol

from batch_assets.gpu.diarization.embeddings.interface import EmbeddingPath
from batch_assets.gpu.diarization.embeddings.pooling import split_problem
from batch_assets.gpu.diarization.embeddings.shared_trunk import SharedTrunkPath
from batch_assets.gpu.diarization.embeddings.skip_covered import SkipCoveredPath
from batch_assets.gpu.diarization.embeddings.stock import STOCK_SWITCHED_OFF, StockPath, stock_fallback
from batch_assets.gpu.diarization.embeddings.trunk_blocks import TrunkBlocksPath


class EmbeddingLevers(Protocol):
    """What a call's embedding step reads of the run's levers (`pipeline.DiarizationCall`)."""

    shared_trunk: bool
    half_precision: bool
    trunk_blocks: bool
    skip_covered: bool


def embedding_path(levers: EmbeddingLevers, pipeline) -> EmbeddingPath:
    """The path `levers` pick for `pipeline`'s embedding step."""
    if not (levers.shared_trunk or levers.trunk_blocks or levers.skip_covered):
        return StockPath(STOCK_SWITCHED_OFF)
    problem = "pipeline in training mode (stock embeddings cache)" if pipeline.training else split_problem(pipeline)
    if problem:
        return StockPath(stock_fallback(problem))
    trunk = TrunkBlocksPath(levers.half_precision) if levers.trunk_blocks else SharedTrunkPath(levers.half_precision)
    return SkipCoveredPath(trunk) if levers.skip_covered else trunk
