"""Bench: a partition of several languages through the real job, against the same audio all in one language.

    .venv/bin/python benchmarks/languages.py [--units-per-language 3] [--routing builtin production-shaped]
                                             [--json bench_out/languages.json]

A mixed partition of two-voice dialogues in English, Spanish, German and Japanese (espeak-ng voices training never
heard, sentences of each language's common words), run through the GPU section (LID `builtin:tiny-langid`, the
tiny diarization) with each routing asked for: `builtin` (the tiny TDTs trained here, `tiny-tdt-ja` for Japanese)
and `production-shaped` (`PRODUCTION_SHAPED`: v2-shaped for English, v3-shaped for Spanish and German, the hybrid
TDT-CTC ja-shaped for Japanese; random weights, so their text means nothing: their seconds do). Per routing:
`auto` twice (each unit's language detected, routed to its model; the first pays the model loads, the second is
timed warm), `--language en` (every unit declared English: one model, no LID), and `auto` with every lever off
(the exact gate against all on: every published column, the word edit rate per language).
Prints per routing: detection accuracy per language, each language's word edit rate (Japanese: character error
rate) against the text spoken, LID seconds per audio-hour and its share of the section, each ASR model's load
seconds and ASR seconds, section seconds of both runs. Then the memory each loaded ASR model costs (RSS of a fresh
process after loading one, two, three, four: the tiny TDTs, and the v2-, v3- and ja-shaped models, `--skip-large`
to leave those out) and the production-layout LID's cost (AmberNet's layout, `models/langid_config.py`) per
audio-hour against the production-shaped section's seconds per audio-hour
(`benchmarks/results/cpu_levers_production_shaped.json`). Torch threads: `--threads` (2).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import soundfile as sf

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PARTITION = "2026-05-01"
LANGUAGES = ("en", "es", "de", "ja")
RATE = 16_000
V2, V3, JA = ("builtin:parakeet-tdt-0.6b-v2-shaped", "builtin:parakeet-tdt-0.6b-v3-shaped",
              "builtin:parakeet-tdt_ctc-0.6b-ja-shaped")
ROUTINGS = {"builtin": "builtin", "production-shaped": f"en={V2},es={V3},de={V3},ja={JA}"}


def make_partition(folder: pathlib.Path, per_language: int, seed: int, languages=LANGUAGES) -> dict[str, dict]:
    """Dialogues of two held-out voices per unit, 6-10 turns; the truth (language, text) by file name."""
    from batch_assets.models.languages import word_separator
    from batch_assets.models.sentences import make_sentences
    from batch_assets.training.corpus import VOICES, synthesize

    rng = np.random.default_rng(seed)
    truth = {}
    folder.mkdir(parents=True, exist_ok=True)
    for li, language in enumerate(languages):
        for u in range(per_language):
            turns = int(rng.integers(6, 11))
            texts = make_sentences(turns, rng, vocabulary=500, lengths=(4, 10), language=language)
            voices = list(rng.choice(list(VOICES[language].held_out), size=2, replace=False))
            clips = synthesize(texts, voices, seed=seed * 1000 + li * 100 + u)
            pieces = [np.zeros(int(0.5 * RATE), np.float32)]
            for clip in clips:
                pieces += [clip.audio, np.zeros(int(rng.uniform(0.4, 1.2) * RATE), np.float32)]
            name = f"{language}_{u:02d}.wav"
            sf.write(folder / name, np.concatenate(pieces), RATE, subtype="PCM_16")
            truth[name] = {"language": language, "text": word_separator(language).join(texts)}
    return truth


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# the resident set now (VmRSS), not getrusage's peak: a child's peak starts at its parent's when it forks, and this
# bench's parent holds the production-shaped models by then
MEMORY_PROBE = """
import json, re, sys, torch
torch.set_num_threads(1)
from batch_assets.models.loaders import load_asr_model
names = json.loads(sys.argv[1])
rss = lambda: int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
import nemo.collections.asr  # noqa: F401 (the library's own memory, before any model)
out = {"library": round(rss(), 1)}
models = []
for i, name in enumerate(names):
    models.append(load_asr_model(name, torch.device("cpu")))
    out[f"{i + 1} loaded"] = round(rss(), 1)
print(json.dumps(out))
"""


def memory(names: list[str]) -> dict:
    """RSS (MiB) of a fresh process after importing NeMo, then after each model of `names` is loaded."""
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, json.dumps(names)], capture_output=True, text=True,
                          cwd=REPO, env=os.environ | {"PYTHONWARNINGS": "ignore"}, timeout=1800)
    if done.returncode != 0:
        return {"error": done.stderr[-500:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def ambernet_seconds_per_unit(repeats: int = 5) -> float:
    """AmberNet's layout on one unit's LID sample (`LID_SPEECH_S` of speech), as the section calls it."""
    import torch

    from batch_assets.gpu.asr.language_id import LID_SPEECH_S, identify
    from batch_assets.models.langid_config import ambernet_shaped_config, build_langid

    model = build_langid(ambernet_shaped_config())
    speech = np.random.default_rng(0).normal(0, 0.1, int(LID_SPEECH_S * RATE)).astype(np.float32)
    identify(model, torch.device("cpu"), speech)  # warm-up
    started = time.perf_counter()
    for _ in range(repeats):
        identify(model, torch.device("cpu"), speech)
    return (time.perf_counter() - started) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units-per-language", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--routing", nargs="+", default=list(ROUTINGS), choices=list(ROUTINGS),
                        help="the routings to run the partition through, in turn")
    parser.add_argument("--skip-large", action="store_true", help="leave out the parakeet-sized memory probe")
    parser.add_argument("--languages", nargs="+", default=list(LANGUAGES), choices=LANGUAGES,
                        help="the partition's languages")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-languages-"))
    truth = make_partition(work / "source" / PARTITION, args.units_per_language, args.seed, args.languages)
    audio_s = sum(sf.info(work / "source" / PARTITION / name).duration for name in truth)
    print(f"corpus: {len(truth)} units ({args.units_per_language} per language: {', '.join(args.languages)}), "
          f"{audio_s / 3600:.3f} audio-hours; {args.threads} torch threads", flush=True)
    report = {"audio_hours": audio_s / 3600, "units": len(truth), "threads": args.threads, "routings": {}}
    for routing in args.routing:
        report["routings"][routing] = run_routing(routing, work / routing, truth, audio_s, args)

    per_unit = ambernet_seconds_per_unit()
    mean_unit_s = audio_s / len(truth)
    production = json.loads((REPO / "benchmarks" / "results" / "cpu_levers_production_shaped.json").read_text())
    all_on = [r for r in production["runs"] if r["variant"] == "all on"]
    section_per_hour = float(np.mean([r["section_s"] for r in all_on])) / production["audio_hours"]
    lid_per_hour = per_unit * 3600 / mean_unit_s
    report["production_layout_lid"] = {"seconds_per_unit": per_unit, "mean_unit_s": mean_unit_s,
                                       "lid_seconds_per_audio_hour": lid_per_hour,
                                       "production_shaped_section_seconds_per_audio_hour": section_per_hour,
                                       "share": lid_per_hour / section_per_hour}
    print(f"AmberNet's layout: {per_unit:.3f} s per unit ({mean_unit_s:.0f} s units: {lid_per_hour:.0f} s per "
          f"audio-hour) vs the production-shaped section's {section_per_hour:.0f} s per audio-hour (all on, CPU): "
          f"{100 * lid_per_hour / section_per_hour:.2f} %")

    report["memory_mib"] = {"tiny": memory(["builtin:tiny-tdt", "builtin:tiny-tdt-es", "builtin:tiny-tdt-de",
                                            "builtin:tiny-tdt-ja"])}
    if not args.skip_large:
        report["memory_mib"]["production-shaped"] = memory([V2, V3, JA])
    for kind, figures in report["memory_mib"].items():
        print(f"RSS (MiB) with ASR models loaded, {kind}: {figures}")
    print(f"this process's peak RSS: {rss_mib():.0f} MiB")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
    shutil.rmtree(work, ignore_errors=True)


def run_routing(routing: str, work: pathlib.Path, truth: dict[str, dict], audio_s: float, args) -> dict:
    """The partition through the job with `routing`'s ASR models: the report of `main`'s docstring, per routing."""
    import dagster as dg
    import jiwer
    import polars as pl

    from batch_assets.definitions import all_assets
    from batch_assets.gate.compare import gate
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.models.languages import UNSPACED, parse_routing
    from batch_assets.orchestration.io_manager import StorageJsonIOManager
    from batch_assets.storage.resource import StorageResource
    from batch_assets.switches import SWITCHES

    source = work.parent / "source"
    print(f"\n== routing {routing}: {ROUTINGS[routing]}", flush=True)
    gpu = GpuResource(device="cpu", lock_dir=str(work / "locks"), torch_threads=args.threads,
                      asr_models=parse_routing(ROUTINGS[routing]))
    gpu.load()  # the diarization pipeline; the ASR models and the LID load at their first use (counted)

    def storage_at(root: pathlib.Path) -> StorageResource:
        return StorageResource(source_url=str(source), storage_url=str(root))

    def resources(root: pathlib.Path) -> dict:
        return {"storage": storage_at(root), "gpu": gpu, "gpu_io": StorageJsonIOManager(storage=storage_at(root))}

    ingest = dg.materialize(all_assets, selection=dg.AssetSelection.assets("fetched_audio", "prepared_flights"),
                            partition_key=PARTITION, resources=resources(work / "ingest"),
                            instance=dg.DagsterInstance.ephemeral())
    assert ingest.success

    def run(name: str, config: dict) -> tuple[dict, pl.DataFrame]:
        root = work / name
        for asset in ("fetched_audio", "prepared_flights"):
            shutil.copytree(work / "ingest" / asset, root / asset)
        result = dg.materialize(all_assets, selection=dg.AssetSelection.assets("vad_scores", "diarization",
                                                                                "transcripts"),
                                partition_key=PARTITION, resources=resources(root),
                                instance=dg.DagsterInstance.ephemeral(),
                                run_config={"ops": {"gpu_section": {"config": config}}})
        assert result.success
        meta = next({k: v.value for k, v in e.materialization.metadata.items()}
                    for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "transcripts")
        units = storage_at(root).read_parquet("transcripts", PARTITION, "units")
        manifest = storage_at(root).read_parquet("fetched_audio", PARTITION, "manifest")
        return meta, units.join(manifest.select("unit_id", "relative_key"), on="unit_id")

    cold_meta, _ = run("auto", {})  # first: pays the model loads, counted as the model_load stage
    load_seconds = {name: s for step in cold_meta["asr_model_load_seconds"] for name, s in step.items()}
    print(f"ASR model loads (seconds, in the section's model_load stage): {load_seconds}; loads per shard: "
          f"{cold_meta['asr_model_loads']}", flush=True)
    mixed_meta, mixed = run("auto-warm", {})  # timed: models loaded, as in a long-lived worker
    english_meta, _ = run("all-english", {"language": "en"})
    off = {switch.name: False for switch in SWITCHES}
    run("auto-levers-off", off)  # every lever off: the exact gate against all on, every column, per language
    verdict = gate(storage_at(work / "auto-levers-off"), storage_at(work / "auto-warm"), [PARTITION], exact=True)
    print(f"levers all on vs all off on the mixed partition: exact gate {'PASS' if verdict.passed else 'FAIL'}; "
          f"word edit rate per language {verdict.language_edit_rates()}; decision columns changed "
          f"{len(verdict.columns.changed)}; largest differences {verdict.columns.largest}", flush=True)
    report = {"routing": ROUTINGS[routing], "per_language": {}, "levers_exact_gate": verdict.as_dict(),
              "asr_model_load_seconds": load_seconds, "asr_seconds_by_model": mixed_meta["asr_seconds_by_model"]}
    print(f"\n{'language':8s} {'units':>5s} {'detected right':>14s} {'confidence':>10s} {'class':>22s} "
          f"{'edit rate':>14s}")
    rows = {row["relative_key"]: row for row in mixed.iter_rows(named=True)}
    right_total = 0
    for language in args.languages:
        names = [n for n, t in truth.items() if t["language"] == language]
        right = sum(rows[n]["language"] == language for n in names)
        right_total += right
        confidence = float(np.mean([rows[n]["language_confidence"] or 0.0 for n in names]))
        classes = sorted({rows[n]["result_class"] for n in names})
        heard = [n for n in names if rows[n]["result_class"] == "transcribed"]
        score = jiwer.cer if language in UNSPACED else jiwer.wer  # Japanese: characters
        rate = score([truth[n]["text"] for n in heard], [rows[n]["text"] or "" for n in heard]) if heard else None
        report["per_language"][language] = {"units": len(names), "detected_right": right,
                                            "mean_confidence": confidence, "classes": classes,
                                            "cer" if score is jiwer.cer else "word_edit_rate": rate}
        print(f"{language:8s} {len(names):>5d} {right:>9d} of {len(names):<2d} {confidence:>10.3f} "
              f"{','.join(classes):>22s} {'-' if rate is None else f'{rate:.3f}':>10s} "
              f"{'CER' if score is jiwer.cer else 'WER'}")
    lid_s = mixed_meta["stage_seconds"]["language_id"]["device"]
    section_s, english_s = mixed_meta["section_seconds"], english_meta["section_seconds"]
    report |= {"detection_accuracy": right_total / len(truth), "lid_seconds": lid_s,
               "lid_seconds_per_audio_hour": lid_s / (audio_s / 3600), "lid_share_of_section": lid_s / section_s,
               "section_seconds_mixed": section_s, "section_seconds_all_english": english_s,
               "asr_model_loads_per_shard": mixed_meta["asr_model_loads"],
               "stage_seconds_mixed": mixed_meta["stage_seconds"],
               "stage_seconds_all_english": english_meta["stage_seconds"]}
    print(f"\ndetection accuracy: {report['detection_accuracy']:.3f}; LID {lid_s:.2f} s = "
          f"{report['lid_seconds_per_audio_hour']:.1f} s per audio-hour = {100 * lid_s / section_s:.2f} % of the "
          f"section")
    print(f"ASR seconds by model (warm): {mixed_meta['asr_seconds_by_model']}")
    print(f"section seconds: mixed (detected, a model per language) {section_s:.1f} s vs the same audio all declared "
          f"English (1 model, no LID) {english_s:.1f} s: {section_s / english_s:.2f}x")
    for name, meta in (("mixed", mixed_meta), ("all English", english_meta)):
        print(f"  {name:12s} " + ", ".join(f"{stage} {split['device'] + split['host']:.2f} s"
                                             for stage, split in meta["stage_seconds"].items()))
    return report


if __name__ == "__main__":
    main()
