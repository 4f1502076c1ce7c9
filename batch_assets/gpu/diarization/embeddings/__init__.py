"""The embedding step's paths, one `EmbeddingPath` each, chosen from a call's levers in one place.

`interface.py` (`EmbeddingPath`, `EmbeddingRequest`, `EmbeddingWork`), `choice.py` (`embedding_path`: the one place
the levers pick a path), one file per path: `stock.py` (pyannote's own), `shared_trunk.py` (lever 4, exact),
`trunk_blocks.py` (approximate lever A), `skip_covered.py` (approximate lever B, around a trunk path), and what the
split paths share (`pooling.py`).

Adding a path: one file here with its `EmbeddingPath`, and one line in `choice.embedding_path`.

May import: gpu.adapters, gpu.device.
"""
