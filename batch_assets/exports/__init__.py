"""Transcripts as files analysts take away: the `transcript_exports` asset and `batch-assets export` (`formats.py`)."""
