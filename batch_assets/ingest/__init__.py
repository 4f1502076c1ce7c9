"""Ingest: list a partition's audio from headers (`fetched_audio`), plan it into flights (`prepared_flights`), and
fetch and decode a flight's audio for the GPU step that processes it (`flight_audio.py`)."""
