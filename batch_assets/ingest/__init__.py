"""Ingest: list and fetch a partition's audio (`fetched_audio`), decode it into flights (`prepared_flights`)."""
