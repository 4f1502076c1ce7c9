# Two commands do everything on a fresh machine:
#   make run    set up, then materialize all five assets for the sample partition and print a summary
#   make test   set up, then run the test suite (what CI runs)
VENV ?= .venv
PY := $(VENV)/bin/python
PARTITION ?= 2026-01-15
export PYANNOTE_METRICS_ENABLED ?= false
export DAGSTER_HOME ?= $(CURDIR)/dagster_home

.PHONY: setup run test dev sample-data train-asr train-diarization bench-levers bench-ingest bench-backfill
setup:
	@bash scripts/install.sh

run: setup
	$(PY) -m batch_assets.cli run --partition $(PARTITION)

test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

dev: setup
	$(VENV)/bin/dagster dev -h 127.0.0.1 -p 3000

sample-data: setup
	$(PY) scripts/make_sample_data.py

train-asr: setup
	$(PY) -m batch_assets.training.train_asr

train-diarization: setup
	$(PY) -m batch_assets.training.train_diarization

bench-levers: setup
	$(PY) benchmarks/levers.py --preset cpu --json bench_out/levers.json

bench-ingest: setup
	$(PY) benchmarks/ingest.py

bench-backfill: setup
	$(PY) benchmarks/backfill.py --json bench_out/backfill.json
