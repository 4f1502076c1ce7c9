"""Recordings of any length: cut into overlapped windows (`windows.py`), stitched back into one unit at assembly
(`stitching.py`), and long synthetic recordings with known turns for benchmarks and tests (`long_audio.py`)."""
