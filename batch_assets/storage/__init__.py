"""Storage: where audio comes from and where a partition's outputs go (`resource.py`), paths taken as they are
(`paths.py`), the files one materialization writes (`partition_outputs.py`) and the partition's lease (`lease.py`)."""
