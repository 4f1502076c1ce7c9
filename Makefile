# Two commands do everything on a fresh machine:
#   make run    set up, then materialize all six assets for the sample partition and print a summary
#   make test   set up, then lint and run the whole test suite (what CI runs)
# and while changing code: make test-fast (lint, then the unit and component tests: no end-to-end runs)
VENV ?= .venv
PY := $(VENV)/bin/python
PARTITION ?= 2026-01-15
export PYANNOTE_METRICS_ENABLED ?= false
export DAGSTER_HOME ?= $(CURDIR)/dagster_home

.PHONY: setup lint run test test-fast dev sample-data train-asr train-asr-languages train-langid train-diarization train-segmentation-shaped bench-levers bench-levers-production-shaped bench-levers-gpu bench-languages bench-ingest bench-streaming bench-backfill bench-shards bench-resume bench-signals bench-long-units bench-channels
setup:
	@bash scripts/install.sh

run: setup
	$(PY) -m batch_assets.cli run --partition $(PARTITION)

lint: setup
	$(VENV)/bin/ruff check .

# -n: pytest-xdist workers (a file's tests stay on one worker, the longest files first: tests/conftest.py). The
# whole suite spends much of its time waiting on daemons, servers and process start-ups: three workers keep two
# cores busy; the fast tests compute, and two workers suit them (docs/contributing.md: the budget).
# --durations: the slowest tests and fixtures, printed after every run (where the suite's time goes)
TEST_WORKERS ?= 3
FAST_WORKERS ?= 2
test: setup lint
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --durations=15

# the tests marked neither e2e (the job, a server, a deployment) nor slow nor gpu (pyproject.toml: markers)
test-fast: setup lint
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n $(FAST_WORKERS) -m "not e2e and not slow and not gpu"

# dagster dev through a wrapper that stops it whole on Ctrl-C or SIGTERM (batch_assets/cli/commands.py: dev)
DEV_PORT ?= 3000
dev: setup
	$(PY) -m batch_assets.cli dev --host 127.0.0.1 --port $(DEV_PORT)

sample-data: setup
	$(PY) scripts/make_sample_data.py

# Five stages, as the shipped model was trained: 70 minutes from scratch on 5,000 sentences; 45 more from
# that checkpoint on 10,000; 80 more on 15,000; 30 at a low learning rate on the same 15,000; then 65 on
# those plus 15,000 grammatical sentences (grammar.py, their own seeded draw and val/test splits). Each stage
# extends the same seeded draw, so the validation and test sentences come after every sentence any stage
# trained on. The budgets are wall-clock minutes: ~5 h on 2 idle cores.
train-asr: setup
	mkdir -p bench_out/train-asr
	$(PY) -m batch_assets.training.train_asr --minutes 70 --train 5000 --out bench_out/train-asr/stage1.nemo
	$(PY) -m batch_assets.training.train_asr --minutes 45 --train 10000 --lr 1e-3 --warmup 100 --init bench_out/train-asr/stage1.nemo --out bench_out/train-asr/stage2.nemo
	$(PY) -m batch_assets.training.train_asr --minutes 80 --train 15000 --lr 8e-4 --warmup 100 --init bench_out/train-asr/stage2.nemo --out bench_out/train-asr/stage3.nemo
	$(PY) -m batch_assets.training.train_asr --minutes 30 --train 15000 --lr 3e-4 --warmup 50 --init bench_out/train-asr/stage3.nemo --out bench_out/train-asr/stage4.nemo
	$(PY) -m batch_assets.training.train_asr --minutes 65 --train 15000 --grammar 15000 --lr 5e-4 --warmup 100 --init bench_out/train-asr/stage4.nemo

# The Spanish, German and Japanese tiny TDTs (builtin:tiny-tdt-es, -de, -ja), as shipped: Spanish and German each
# language's 500 most common words in its own espeak-ng voices, German one 30-minute stage from scratch, Spanish that
# and a 25-minute stage on 10,000 sentences; Japanese the kana-only words among its 10,000 most common (2,857),
# transcribed without spaces, a 40-minute stage on 8,000 sentences, then 25 minutes on one thread on the same
# sentences with 30 % of their words made-up hiragana ones, up to 0.6 s of quiet room around each utterance and
# runs of 1-3 utterances joined by pauses, as the section's merged segments are (docs/models.md); ~2.7 h on 2 idle
# cores
train-asr-languages: setup
	mkdir -p bench_out/train-asr-ja
	$(PY) -m batch_assets.training.train_asr --language ja --words 5000 --minutes 40 --train 8000 --out bench_out/train-asr-ja/stage1.nemo
	$(PY) -m batch_assets.training.train_asr --language ja --words 5000 --pseudo-words 0.3 --pad 0.6 --join 3 --minutes 25 --train 8000 --lr 1e-3 --warmup 100 --threads 1 --init bench_out/train-asr-ja/stage1.nemo --out batch_assets/models/weights/tiny-tdt-ja.nemo
	mkdir -p bench_out/train-asr-es
	$(PY) -m batch_assets.training.train_asr --language de --minutes 30 --train 5000 --threads 1 --out batch_assets/models/weights/tiny-tdt-de.nemo
	$(PY) -m batch_assets.training.train_asr --language es --minutes 30 --train 5000 --threads 1 --out bench_out/train-asr-es/stage1.nemo
	$(PY) -m batch_assets.training.train_asr --language es --minutes 25 --train 10000 --lr 1e-3 --warmup 100 --init bench_out/train-asr-es/stage1.nemo --out batch_assets/models/weights/tiny-tdt-es.nemo

# The builtin language identification (builtin:tiny-langid): English, Spanish, German, Japanese; ~14 minutes
train-langid: setup
	$(PY) -m batch_assets.training.train_langid --minutes 12

train-diarization: setup
	$(PY) -m batch_assets.training.train_diarization

# the production-shaped profile's segmentation (segmentation-3.0's architecture, 10 s chunks): ~28 CPU minutes
train-segmentation-shaped: setup
	$(PY) -m batch_assets.training.train_diarization --production-shaped-segmentation --segmentation-minutes 24

bench-levers: setup
	$(PY) benchmarks/levers.py --preset cpu --json bench_out/levers.json

# production architectures at production sizes (random weights but the trained segmentation)
bench-levers-production-shaped: setup
	$(PY) benchmarks/levers.py --preset cpu --models production-shaped --json bench_out/levers-production-shaped.json

# on a machine with one CUDA GPU, ~1.5 audio-hours: all off / all on / all on + half / all on + tf32, then all on +
# both approximate levers (gated against all on), 2 repeats, within one 10-minute command
bench-levers-gpu: setup
	$(PY) benchmarks/levers.py --preset gpu --models production-shaped --device cuda --json bench_out/levers-gpu.json

# a partition in four languages, detected and routed, against the same audio all declared English, with the builtin
# and the production-shaped routings (~7 minutes)
bench-languages: setup
	$(PY) benchmarks/languages.py --json bench_out/languages.json

bench-ingest: setup
	$(PY) benchmarks/ingest.py

# S3 source and storage behind a counting proxy, through batch-assets run: bytes read, bytes before the first GPU step,
# storage per audio-hour (~2 minutes)
bench-streaming: setup
	$(PY) benchmarks/streaming.py --copies 8 --json bench_out/streaming.json

bench-backfill: setup
	$(PY) benchmarks/backfill.py --json bench_out/backfill.json

bench-shards: setup
	$(PY) benchmarks/shards.py --json bench_out/shards.json

# a partition in 4 shards, uninterrupted and killed in its first shard: GPU steps per run, resumed wall time
bench-resume: setup
	$(PY) benchmarks/resume.py --json bench_out/resume.json

# Ctrl-C (SIGINT to the group) on batch-assets run at 20 random moments, each followed by a run to success: ~20 min
bench-signals: setup
	$(PY) benchmarks/signals.py --tries 20 --json bench_out/signals.json

# 0.5, 1, 2, 4 and 8 audio-hours as one unit each, builtin models on 2 CPU threads: about 40 minutes
bench-long-units: setup
	$(PY) benchmarks/long_units.py --out bench_out/long_units.json

# two-channel calls read by channel against mixed and diarized (~1 minute on 2 cores, tiny models)
bench-channels: setup
	$(PY) benchmarks/channels.py --json bench_out/channels.json
