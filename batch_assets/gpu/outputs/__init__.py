"""What a flight's outcomes become: the published tables, each flight's commit of them, and what made a commit.

`tables.py` (the three assets' parquet tables from the section's outcomes), `commits.py` (a flight's results
written durably before the next flight's are kept), `commit_identity.py` (the schema, package, models and switches
a commit records, and a resume compares). No Dagster.

May import: gpu.section.
"""
