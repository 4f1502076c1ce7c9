"""The published tables' schema: what every column means (`columns.py`), how a table is written for analysts
(`published.py`) and the closed set of per-unit result classes (`results.py`). No Dagster."""
