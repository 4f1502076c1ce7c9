"""Bench the levers through the real assets, on two model profiles, and gate every run against the all-off run.

    .venv/bin/python benchmarks/levers.py --preset cpu                               # tiny models, ~6 min on 2 cores
    .venv/bin/python benchmarks/levers.py --preset cpu --models production-shaped    # ~24 min on 2 cores
    .venv/bin/python benchmarks/levers.py --preset gpu --models production-shaped    # one CUDA GPU, < 10 min

Model profiles (`--models`): `tiny`, the offline defaults; `production-shaped`, the production
architectures at production sizes (parakeet-tdt-0.6b-v2's FastConformer-TDT and community-1's WeSpeaker
ResNet34 + VBx/PLDA with seeded random weights; segmentation-3.0's PyanNet, 10 s chunks, trained here; see
`batch_assets/models/production_shaped.py`), whose stage costs are production's.

One process: the corpus is generated (real speech cut from the sample partition into units of varied
lengths, some silent), `fetched_audio` and `prepared_flights` are materialized once, then the GPU step
(`gpu_section`, the same code the UI runs) is materialized once untimed with all levers off (the warm-up,
and the gate's baseline), then for every variant, `--repeats` times: all levers off, each lever alone,
the three seed levers, levers 1-4, all on (every lever that changes no result), all on + half precision,
all on + each approximate lever and all on + both (`all on + approximate`) (each preset picks a subset to fit its
time; `--variants` overrides). The approximate variants are gated against the first all on run, not all off:
word edit rate, speaker agreement, lost speech, class changes, and with `--corpus dialogues` (whose truth is
known) DER at most 0.5 points over all on's; a variant is called a win only if every one of its gates passes.
Every unit read of a flight waits a simulated storage latency (`--latency`, default 0.43 s; the seed's
production figure is 0.27 s): with lever 1 a flight's units are read concurrently (`--fetch-workers`) and
flights prepared ahead, without it one unit after another. Torch threads are set explicitly (`--threads`).
Prints the per-stage table with segmentation and embedding work, the section's seconds split per stage into
device work (model forwards) and host work, where the section's time goes (the share spent waiting for
flights, the share the device is busy, each stage's device seconds per audio-hour), then `all on vs all off`
(audio-hours per compute-hour), `diarization all on vs all off` (diarization stage seconds), lever 2 alone, what
levers 5 and 6 add, the gates of half precision and TF32 against full precision (they decide whether those
switches may be on), then for each approximate variant `diarization <variant> vs all on: X.XXx` and `<variant>
vs all off: X.XXx` with its gate's figures, and a GPU step's fixed cost (model imports and load, the first run's
extra over a steady one) with the shard size that keeps it under 10 % of a step; and writes JSON (`--json`).
The GPU preset warms up with all on (its graph capture and tuning are the fixed cost measured) and gates
against its first all off run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import sys
import tempfile
import time

import numpy as np
import soundfile as sf

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from batch_assets.gate.columns import CONTINUOUS, EMBEDDING, SCORE  # noqa: E402 (after the path insert)
from batch_assets.gpu.section.stats import STAGES  # noqa: E402 (after the path insert)
from batch_assets.models.names import MODEL_PROFILES  # noqa: E402 (after the path insert)
from batch_assets.switches import (  # noqa: E402 (after the path insert; light: no model library)
    APPROXIMATE_SWITCHES,
    EXACT_SWITCHES,
    NUMBERS_SWITCHES,
    SWITCHES,
)

PARTITION = "2026-04-01"
MODELS = MODEL_PROFILES
LEVERS = tuple(s.name for s in SWITCHES)
EXACT = EXACT_SWITCHES  # the levers that change no result (on by default)
TRUNK_BLOCKS, SKIP_COVERED = APPROXIMATE_SWITCHES  # change results by design: gated against "all on"
HALF, TF32 = NUMBERS_SWITCHES  # change numbers: gated against full precision, not held to "identical"
SEED_LEVERS = LEVERS[:3]  # the three the project started with
SHORT = {"prepare_flight_enabled": "prepare flights", "vad_segmentation_reuse_enabled": "reuse segmentation",
         "asr_cuda_graphs_enabled": "cuda graphs", "embedding_shared_trunk_enabled": "shared trunk",
         "batch_across_units_enabled": "batch across units", "host_overlap_enabled": "host overlap",
         HALF: "half precision", TF32: "tf32", TRUNK_BLOCKS: "trunk blocks", SKIP_COVERED: "skip covered"}
VARIANTS = ({"all off": ()} | {SHORT[lever]: (lever,) for lever in LEVERS}
            | {"seed levers": SEED_LEVERS, "levers 1-4": LEVERS[:4], "all on": EXACT, "all on + half": (*EXACT, HALF),
               "all on + tf32": (*EXACT, TF32),
               "all on, reuse off": tuple(lever for lever in EXACT if lever != "vad_segmentation_reuse_enabled"),
               "all on + trunk blocks": (*EXACT, TRUNK_BLOCKS), "all on + skip covered": (*EXACT, SKIP_COVERED),
               "all on + approximate": (*EXACT, *APPROXIMATE_SWITCHES)})
APPROXIMATE = ("all on + trunk blocks", "all on + skip covered", "all on + approximate")
# (models, preset) -> corpus and default variants
PRESETS = {
    ("tiny", "cpu"): {"units": 12, "min_s": 20.0, "max_s": 90.0, "silent_share": 0.15,
                      "variants": ["all off", "batch across units", "host overlap", "levers 1-4", "all on",
                                   "all on + half"]},
    ("tiny", "gpu"): {"units": 120, "min_s": 20.0, "max_s": 100.0, "silent_share": 0.1, "variants": list(VARIANTS)},
    ("production-shaped", "cpu"): {"units": 4, "min_s": 15.0, "max_s": 30.0, "silent_share": 0.15,
                                   "variants": ["all off", "seed levers", "levers 1-4", "all on, reuse off", "all on",
                                                "all on + half", *APPROXIMATE]},
    # >= 1.5 audio-hours of sample speech and dialogues: enough flights for a steady state; warmed up with all on
    # (CUDA graphs captured, cuDNN tuned) and gated against its first all off run, to fit one 10-minute command
    ("production-shaped", "gpu"): {"units": 40, "min_s": 60.0, "max_s": 150.0, "silent_share": 0.1,
                                   "dialogues": 14, "warmup": "all on",
                                   "variants": ["all off", "all on", "all on + half", "all on + tf32",
                                                "all on + approximate"]},
}


def generate(folder: pathlib.Path, units: int, min_s: float, max_s: float, silent_share: float, seed: int) -> float:
    from batch_assets.long_units.long_audio import sample_audio_paths, sample_speech

    rng = np.random.default_rng(seed)
    source = np.concatenate([sample_speech(path) for path in sample_audio_paths(speech_only=True)])
    folder.mkdir(parents=True, exist_ok=True)
    total = 0.0
    for i in range(units):
        seconds = float(rng.uniform(min_s, max_s))
        n = int(seconds * 16000)
        if rng.random() < silent_share:
            audio = rng.normal(0, 0.002, n).astype(np.float32)
        else:
            start = int(rng.integers(0, len(source) - n)) if len(source) > n else 0
            audio = np.resize(source[start:], n)
        sf.write(folder / f"unit_{i:03d}.wav", audio, 16000, subtype="PCM_16")
        total += seconds
    return total


def generate_dialogues(folder: pathlib.Path, units: int, min_s: float, max_s: float, seed: int) -> tuple[float, dict]:
    """Hidden-style dialogues: 2-4 espeak-ng voices (drawn with a seed the training corpora do not use), turns of one
    to five utterances (about 2-20 s), pauses and now and then overlapping speech (`training/speakers.py`), each
    unit about `min_s`..`max_s` long. Returns the audio seconds and the truth, `{unit_id: [[start_s, end_s,
    speaker], ...]}`."""
    from batch_assets.training.speakers import dialogue, make_speakers, utterance_pool

    rng = np.random.default_rng(seed + 1000)  # not the training corpora's seeds
    pool = utterance_pool(make_speakers(10, rng), per_speaker=12, rng=rng)
    folder.mkdir(parents=True, exist_ok=True)
    total, truth = 0.0, {}
    for i in range(units):
        turns = max(2, int(rng.uniform(min_s, max_s) / 7.0))  # a turn and its pause: about 7 s
        audio, spoken = dialogue(pool, rng, speakers=int(rng.integers(2, 5)), turns=(turns, turns), overlap_p=0.15,
                                 utterances_per_turn=(1, 5))
        name = f"dialogue_{i:03d}.wav"
        sf.write(folder / name, audio, 16000, subtype="PCM_16")
        truth[name] = [[start, end, speaker] for speaker, start, end in spoken]
        total += len(audio) / 16000
    return total, truth


def switches(variant: str) -> dict[str, bool]:
    return {lever: lever in VARIANTS[variant] for lever in LEVERS}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--models", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--variants", help=f"comma-separated, from: {', '.join(VARIANTS)}")
    parser.add_argument("--units", type=int)
    parser.add_argument("--corpus", choices=["sample", "dialogues"], default="sample",
                        help="sample: speech cut from the sample partition, some units silent; dialogues: "
                             "hidden-style dialogues of 2-4 new voices with overlaps")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--latency", type=float, default=0.43,
                        help="simulated storage latency per unit read (s): 0.43 measured on the first H200 run's "
                             "storage, 0.27 the seed's production figure (fetch + decode)")
    parser.add_argument("--budget", type=float, default=1800.0, help="decode budget per flight (audio s)")
    parser.add_argument("--flight-units", type=int, default=8, help="most units per flight")
    parser.add_argument("--prepare-workers", type=int, default=2, help="flights prepared concurrently (lever 1)")
    parser.add_argument("--fetch-workers", type=int, default=8, help="a flight's units read concurrently (lever 1)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads (0: one per CPU core this process may use)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import dagster as dg

    from batch_assets.definitions import all_assets
    from batch_assets.gate.compare import gate
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.orchestration.io_manager import StorageJsonIOManager
    from batch_assets.storage.resource import StorageResource

    preset = PRESETS[args.models, args.preset] | ({"units": args.units} if args.units else {})
    variants = args.variants.split(",") if args.variants else preset["variants"]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or "all off" not in variants:
        parser.error(f"--variants: unknown {unknown} (known: {', '.join(VARIANTS)}); 'all off' is the gate's baseline")
    if set(variants) & set(APPROXIMATE) and "all on" not in variants:
        parser.error("--variants: an approximate variant is gated against 'all on': add it")
    # all off first (the exact gates' baseline), the approximate variants after all on (theirs)
    variants = ["all off", *[v for v in variants if v not in ("all off", *APPROXIMATE)],
                *[v for v in variants if v in APPROXIMATE]]
    threads = args.threads or len(os.sched_getaffinity(0))
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-levers-"))
    truth = None  # the dialogues' true turns: the gates then hold DER against them
    if args.corpus == "dialogues":
        audio_s, turns = generate_dialogues(work / "source" / PARTITION, preset["units"], preset["min_s"],
                                            preset["max_s"], args.seed)
        truth = {PARTITION: turns}
    else:
        audio_s = generate(work / "source" / PARTITION, preset["units"], preset["min_s"], preset["max_s"],
                           preset["silent_share"], args.seed)
        if preset.get("dialogues"):  # and dialogues beside the sample speech (no truth: not every unit has one)
            audio_s += generate_dialogues(work / "source" / PARTITION, preset["dialogues"], preset["min_s"],
                                          preset["max_s"], args.seed)[0]
    print(f"corpus: {preset['units']} units ({args.corpus}) + {preset.get('dialogues', 0)} dialogues, "
          f"{audio_s / 3600:.3f} audio-hours; models {args.models}; {threads} torch threads", flush=True)
    asr_model, diarization_pipeline = MODELS[args.models]
    gpu = GpuResource(device=args.device, lock_dir=str(work / "locks"), asr_model=asr_model,
                      diarization_pipeline=diarization_pipeline, torch_threads=threads)
    load_started = time.perf_counter()  # a fresh GPU step's: the model libraries' imports and every model's load
    loaded = gpu.load()  # every model before the first timed run (ASR and LID otherwise load at their first use)
    loaded.asr, loaded.language_id  # noqa: B018
    load_s = time.perf_counter() - load_started

    def storage_at(root: pathlib.Path) -> StorageResource:
        return StorageResource(source_url=str(work / "source"), storage_url=str(root),
                               simulated_latency_per_unit_s=args.latency)

    def resources(root: pathlib.Path) -> dict:
        return {"storage": storage_at(root), "gpu": gpu, "gpu_io": StorageJsonIOManager(storage=storage_at(root))}

    ingest_root = work / "ingest"
    started = time.perf_counter()
    ingest = dg.materialize(
        all_assets, selection=dg.AssetSelection.assets("fetched_audio", "prepared_flights"), partition_key=PARTITION,
        resources=resources(ingest_root), instance=dg.DagsterInstance.ephemeral(),
        run_config={"ops": {"prepared_flights": {"config": {"decode_budget_seconds": args.budget,
                                                           "max_units_per_flight": args.flight_units}}}})
    assert ingest.success
    ingest_s = time.perf_counter() - started
    models = gpu.models  # loaded once for the whole bench, as in a long-lived worker
    device = str(models.device)

    def run_variant(name: str, root: pathlib.Path) -> tuple[float, dict, StorageResource]:
        for asset in ("fetched_audio", "prepared_flights"):
            shutil.copytree(ingest_root / asset, root / asset)
        config = switches(name) | {"decode_budget_seconds": args.budget, "prepare_workers": args.prepare_workers,
                                   "fetch_workers": args.fetch_workers}
        started = time.perf_counter()
        result = dg.materialize(
            all_assets, selection=dg.AssetSelection.assets("vad_scores", "diarization", "transcripts"),
            partition_key=PARTITION, resources=resources(root), instance=dg.DagsterInstance.ephemeral(),
            run_config={"ops": {"gpu_section": {"config": config}}})
        wall = time.perf_counter() - started
        assert result.success
        meta = next({k: v.value for k, v in e.materialization.metadata.items()}
                    for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "transcripts")
        return wall, meta, storage_at(root)

    # Untimed: the first run pays one-off costs (kernel and allocator warm-up, pyannote's probe of the embedding
    # model's minimum input, CUDA context and cuDNN autotuning, CUDA-graph capture), which would flatter every later
    # variant. Warmed up with all off, that run is the gate's baseline; otherwise the first timed all off run is.
    warmup = preset.get("warmup", "all off")
    warmup_wall, _, baseline = run_variant(warmup, work / "baseline")
    print(f"{'warm-up: ' + warmup:20s} {warmup_wall:6.1f} s wall (untimed"
          + ("; the gate's baseline)" if warmup == "all off" else ")"), flush=True)
    baseline = baseline if warmup == "all off" else None
    rows = []
    all_on = None  # the first "all on" run: the approximate variants' baseline
    for repeat in range(args.repeats):
        for name in variants:
            wall, meta, storage = run_variant(name, work / f"run-{len(rows):02d}")
            all_on = all_on or (storage if name == "all on" else None)
            baseline = baseline or (storage if name == "all off" else None)
            config, approximate = switches(name), name in APPROXIMATE
            # the exact levers: every column against all off; half precision and the approximate levers: the
            # gate's bars (the approximate ones against the exact all on run), with DER where a truth is known
            verdict = gate(all_on if approximate else baseline, storage, [PARTITION],
                           exact=not (any(config[n] for n in NUMBERS_SWITCHES) or approximate), truth=truth)
            rows.append({
                "variant": name, "repeat": repeat, "switches": config, "wall_s": wall,
                "gated_against": "all on" if approximate else "all off",
                "audio_hours_per_compute_hour": (audio_s / 3600) / (wall / 3600),
                "section_s": meta["section_seconds"], "asr_s": meta["asr_seconds"],
                "diarization_s": meta["diarization_seconds"],
                "vad_s": meta["vad_seconds"], "flight_load_wait_s": meta["flight_load_wait_seconds"],
                "flight_load_wait_share": meta["flight_load_wait_share"],
                "device_busy_share": meta["device_busy_share"],
                "device_s_per_audio_hour": meta["device_seconds_per_audio_hour"],
                "segmentation_forwards": meta["segmentation_forwards"], "decoder_modes": meta["decoder_modes"],
                "embedding_work": meta["embedding_work"], "embedding_paths": meta["embedding_paths"],
                "cuda_peak_gib": meta.get("cuda_peak_memory_gib"), "stage_seconds": meta["stage_seconds"],
                "host_in_section_s": meta["host_seconds_in_section"],
                "host_after_section_s": meta["host_after_section_seconds"], "precision": meta["precision"],
                "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "gate": verdict.as_dict(),
            })
            print(f"{name:21s} repeat {repeat}: {wall:6.1f} s wall, gate {'PASS' if verdict.passed else 'FAIL'}",
                  flush=True)
    del models
    summary = report(rows, variants, device)
    summary["fixed_cost"] = fixed_cost(rows, warmup, warmup_wall, load_s, audio_s)
    print(f"(ingest {ingest_s:.1f} s once, model load {load_s:.1f} s once, device {device})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"preset": args.preset, "models": args.models, "corpus": args.corpus,
                                         "torch_threads": threads,
                                         "audio_hours": audio_s / 3600, "latency_per_unit_s": args.latency,
                                         "ingest_s": ingest_s, "model_load_s": load_s, **summary, "runs": rows},
                                        indent=2, default=str))


def report(rows: list[dict], variants: list[str], device: str) -> dict:
    """Print the per-run table, the section's device/host split, and the ratio lines; return the summary numbers."""
    rate = "audio-h/GPU-h" if device.startswith("cuda") else "audio-h/compute-h"
    print(f"\n{'variant':21s} {'rep':>3s} {rate:>17s} {'section s':>9s} {'VAD s':>6s} {'diar s':>7s} {'ASR s':>6s} "
          f"{'load wait':>9s} {'seg fwd':>7s} {'trunk fwd':>9s} {'pooled':>6s} {'peak memory':>16s} {'WER':>6s} "
          f"{'spk':>5s} {'gate':>4s} {'score diff':>10s} {'emb diff':>9s} {'DER truth':>9s} {'DER vs base':>11s}")
    for r in rows:
        g, e = r["gate"], r["embedding_work"]
        memory = (f"{r['cuda_peak_gib']:.2f} GiB CUDA" if r["cuda_peak_gib"] is not None
                  else f"{r['peak_rss_mib']:.0f} MiB RSS")
        print(f"{r['variant']:21s} {r['repeat']:>3d} {r['audio_hours_per_compute_hour']:>17.1f} {r['section_s']:>9.1f} "
              f"{r['vad_s']:>6.1f} {r['diarization_s']:>7.1f} {r['asr_s']:>6.1f} {r['flight_load_wait_s']:>9.1f} "
              f"{r['segmentation_forwards']:>7d} {e['trunk_forwards']:>9d} {e['pooled_pairs']:>6d} {memory:>16s} "
              f"{g['word_edit_rate']:>6.4f} {g['speaker_agreement']:>5.3f} {'PASS' if g['passed'] else 'FAIL':>4s} "
              f"{g['largest_difference'][SCORE]:>10.1e} {g['largest_difference'][EMBEDDING]:>9.1e} "
              f"{_percent(g.get('der_vs_truth', {}).get('candidate')):>9s} {_percent(g['der_vs_baseline']):>11s}")
    print("\nsection seconds split into device work (model forwards) and host work, per stage (mean of runs); "
          "'host in section' is host work on the device work's path (lever 6 moves the rest off it)")
    stages = STAGES
    print(f"{'variant':21s} " + " ".join(f"{stage + ' dev/host':>20s}" for stage in stages)
          + f" {'device s':>8s} {'host s':>7s} {'host in section':>15s} {'host share':>10s} {'after section':>13s}")

    def mean(name: str, key) -> float:
        return float(np.mean([key(r) if callable(key) else r[key] for r in rows if r["variant"] == name]))

    split = {}
    for name in variants:
        device_s = mean(name, lambda r: sum(v["device"] for v in r["stage_seconds"].values()))
        host_s = mean(name, lambda r: sum(v["host"] for v in r["stage_seconds"].values()))
        in_section, section_s = mean(name, "host_in_section_s"), mean(name, "section_s")
        split[name] = {"device_s": device_s, "host_s": host_s, "host_in_section_s": in_section,
                       "host_share_of_section": in_section / section_s if section_s else None,
                       "host_after_section_s": mean(name, "host_after_section_s"),
                       "stages": {stage: {k: mean(name, lambda r, st=stage, k=k:
                                                  r["stage_seconds"].get(st, {}).get(k, 0.0))
                                          for k in ("device", "host")} for stage in stages}}
        cells = " ".join(f"{split[name]['stages'][st]['device']:>9.1f} / {split[name]['stages'][st]['host']:>8.2f}"
                         for st in stages)
        print(f"{name:21s} {cells} {device_s:>8.1f} {host_s:>7.2f} {in_section:>15.2f} "
              f"{100 * (split[name]['host_share_of_section'] or 0):>9.1f}% "
              f"{split[name]['host_after_section_s']:>13.2f}")

    print("\nwhere the section's time goes (mean of runs): waiting for flights from storage, and the device busy "
          "(model forwards); device seconds per audio-hour per stage")
    busy = {}
    for name in variants:
        per_hour = {stage: mean(name, lambda r, st=stage: r["device_s_per_audio_hour"].get(st, 0.0))
                    for stage in stages}
        busy[name] = {"flight_load_wait_share": mean(name, lambda r: r["flight_load_wait_share"] or 0.0),
                      "device_busy_share": mean(name, lambda r: r["device_busy_share"] or 0.0),
                      "device_s_per_audio_hour": per_hour}
        print(f"{name:21s} load wait {100 * busy[name]['flight_load_wait_share']:5.1f}%  device busy "
              f"{100 * busy[name]['device_busy_share']:5.1f}%  " + "  ".join(
                  f"{stage} {v:.1f}" for stage, v in per_hour.items() if v))
    exact = [r for r in rows if r["variant"] not in APPROXIMATE
             and not any(r["switches"].get(n) for n in NUMBERS_SWITCHES)]
    print("\nevery published column against all off: decision columns changed, and the largest difference of each "
          "continuous column (bounds: " + ", ".join(f"{c} {b:.0e}" for c, b in CONTINUOUS.items()) + ")")
    columns = {}
    for name in variants:
        runs = [r["gate"] for r in rows if r["variant"] == name]
        columns[name] = {"changed_columns": sorted({c for g in runs for c in g["changed_columns"]}),
                         "largest_difference": {c: max(g["largest_difference"][c] for g in runs) for c in CONTINUOUS}}
        print(f"{name:21s} changed {len(columns[name]['changed_columns']):>2d}  " + "  ".join(
            f"{c} {v:.2e}" for c, v in columns[name]["largest_difference"].items()))
    summary = {"gates_passed": all(r["gate"]["passed"] for r in exact), "device_host": split, "columns": columns,
               "section_time": busy,
               "mean": {name: {key: mean(name, key) for key in ("audio_hours_per_compute_hour", "section_s", "vad_s",
                                                                 "diarization_s", "asr_s")} for name in variants}}
    print(f"\nevery run of the exact levers gated against all off, every column: "
          f"{'PASS' if summary['gates_passed'] else 'FAIL'}")
    if "all on" in variants:
        summary["speedup_all_on_vs_off"] = (mean("all on", "audio_hours_per_compute_hour")
                                            / mean("all off", "audio_hours_per_compute_hour"))
        summary["diarization_speedup_all_on_vs_off"] = (mean("all off", "diarization_s")
                                                        / mean("all on", "diarization_s"))
        print(f"all on vs all off: {summary['speedup_all_on_vs_off']:.2f}x ({rate})")
        print(f"diarization all on vs all off: {summary['diarization_speedup_all_on_vs_off']:.2f}x "
              "(diarization stage seconds)")
    for alone, base in (("reuse segmentation", "all off"), ("all on", "all on, reuse off")):
        if alone in variants and base in variants:  # lever 2 on its own, or taken out of all on
            summary["lever_2_diarization_s"] = {"off": mean(base, "diarization_s"), "on": mean(alone, "diarization_s"),
                                                "variants": [base, alone]}
            print(f"lever 2 ({base} -> {alone}): diarization {summary['lever_2_diarization_s']['off']:.1f} s -> "
                  f"{summary['lever_2_diarization_s']['on']:.1f} s")
    if "levers 1-4" in variants and "all on" in variants:
        summary["speedup_all_on_vs_levers_1_4"] = (mean("all on", "audio_hours_per_compute_hour")
                                                   / mean("levers 1-4", "audio_hours_per_compute_hour"))
        print(f"all on vs levers 1-4 (what levers 5 and 6 add): {summary['speedup_all_on_vs_levers_1_4']:.2f}x")
    for switch, key, variant in ((HALF, "half_precision", "all on + half"), (TF32, "tf32", "all on + tf32")):
        runs = [r for r in rows if r["switches"].get(switch)]
        if not runs:
            continue
        h = summary[key] = {"gate_passed": all(r["gate"]["passed"] for r in runs),
                            "word_edit_rate": max(r["gate"]["word_edit_rate"] for r in runs),
                            "speaker_agreement": min(r["gate"]["speaker_agreement"] for r in runs),
                            "precision": runs[0]["precision"]}
        if "all on" in variants and variant in variants:
            h["speedup_vs_all_on"] = (mean(variant, "audio_hours_per_compute_hour")
                                      / mean("all on", "audio_hours_per_compute_hour"))
        print(f"{SHORT[switch]} ({', '.join(h['precision'])}) against full precision: "
              f"word edit rate <= {h['word_edit_rate']:.4f}, speaker agreement >= {h['speaker_agreement']:.3f}: "
              f"gate {'PASS' if h['gate_passed'] else 'FAIL'} (it decides whether the switch may be on)"
              + (f"; {h['speedup_vs_all_on']:.2f}x all on" if "speedup_vs_all_on" in h else ""))
    approximate = [name for name in variants if name in APPROXIMATE]
    if approximate:
        print("\napproximate levers, each run gated against the exact all on run (speaker agreement >= 0.97, word edit "
              "rate <= 1%, no lost speech, no class change, and with a truth DER at most 0.5 points over all on's): a "
              "variant is a win only if every run's gate passes")
        summary["approximate"] = {}
    for name in approximate:
        runs = [r["gate"] for r in rows if r["variant"] == name]
        figures = {"gate_passed": all(g["passed"] for g in runs),
                   "diarization_speedup_vs_all_on": mean("all on", "diarization_s") / mean(name, "diarization_s"),
                   "speedup_vs_all_off": (mean(name, "audio_hours_per_compute_hour")
                                          / mean("all off", "audio_hours_per_compute_hour")),
                   "speaker_agreement": min(g["speaker_agreement"] for g in runs),
                   "word_edit_rate": max(g["word_edit_rate"] for g in runs),
                   "lost_speech_s": max(g["lost_speech_s"] for g in runs),
                   "class_changes": max(len(g["class_changes"]) for g in runs),
                   "der_vs_all_on": max(g["der_vs_baseline"] for g in runs)}
        if all("der_vs_truth" in g for g in runs):
            figures |= {"der_vs_truth": max(g["der_vs_truth"]["candidate"] for g in runs),
                        "all_on_der_vs_truth": runs[0]["der_vs_truth"]["baseline"],
                        "der_points_worse": max(g["der_vs_truth"]["points_worse"] for g in runs)}
        summary["approximate"][name] = figures
        verdict = "a win: gate PASS" if figures["gate_passed"] else "NOT a win: gate FAIL"
        print(f"diarization {name} vs all on: {figures['diarization_speedup_vs_all_on']:.2f}x ({verdict})")
        print(f"{name} vs all off: {figures['speedup_vs_all_off']:.2f}x ({rate}; {verdict})")
        print(f"  gate: speaker agreement >= {figures['speaker_agreement']:.4f}, word edit rate <= "
              f"{figures['word_edit_rate']:.4f}, lost speech <= {figures['lost_speech_s']:.2f} s, class changes "
              f"{figures['class_changes']}, DER vs all on's turns <= {100 * figures['der_vs_all_on']:.2f} %"
              + (f", DER vs truth {100 * figures['der_vs_truth']:.2f} % (all on "
                 f"{100 * figures['all_on_der_vs_truth']:.2f} %, {figures['der_points_worse']:+.2f} points)"
                 if "der_vs_truth" in figures else
                 ", DER vs truth: no truth (--corpus dialogues has one)"))
    return summary


def fixed_cost(rows: list[dict], warmup: str, warmup_wall: float, load_s: float, audio_s: float) -> dict:
    """What every GPU step pays once, in a fresh process (a fresh pod on Kubernetes): the model libraries' imports
    and the models' load, and the first run's extra over a steady run of the same variant (warm-up, CUDA-graph
    capture, cuDNN tuning); the shard size that keeps it under 10 % of a step at the warm-up variant's rate."""
    steady = [r["wall_s"] for r in rows if r["variant"] == warmup]
    if not steady:
        return {}
    first_run_extra = max(0.0, warmup_wall - float(np.mean(steady)))
    fixed = load_s + first_run_extra
    rate = (audio_s / 3600) / (float(np.mean(steady)) / 3600)  # audio-hours per compute-hour
    figures = {"model_load_s": load_s, "first_run_extra_s": first_run_extra, "fixed_s": fixed,
               "rate_audio_h_per_h": rate, "shard_audio_hours_for_10_percent": 9 * fixed * rate / 3600}
    print(f"fixed cost of a GPU step: model imports and load {load_s:.1f} s + first run's extra "
          f"{first_run_extra:.1f} s = {fixed:.1f} s; at {warmup}'s {rate:.0f} audio-h/h it stays under 10 % of a "
          f"step from {figures['shard_audio_hours_for_10_percent']:.1f} audio-hours a shard")
    return figures


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


if __name__ == "__main__":
    main()
