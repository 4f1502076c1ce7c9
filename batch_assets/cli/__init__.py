"""The operator's command line, `batch-assets` (`commands.py`): its run flags (`run_flags.py`), what a run prints
(`run_output.py`), `dagster dev` stopped whole (`dev_server.py`) and the model-cache fill (`models_fetch.py`)."""
