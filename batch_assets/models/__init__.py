"""Model loading: production names or local paths, and the tiny offline models the project builds itself.

Importing this package is cheap; NeMo and pyannote are imported only inside the functions that need
them, so the Dagster code location loads in a couple of seconds.
"""
