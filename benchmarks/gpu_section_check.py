"""The GPU section's per-flight work on a real device, with each lever on and off, compared.

Loads the builtin models through the project's loaders onto the device, packs the sample partition's
units into one flight, and runs `process_flight` (VAD -> diarization -> ASR -> attribution) with all
levers on, each relevant lever off, and all off: every variant must give identical regions, turns and
words (times and speakers), and word scores and embeddings identical or (batch shapes, CUDA algorithms) within
the last float bits (the largest difference of each is reported). Reports stage
seconds, segmentation forwards and CUDA peak memory. No Dagster or polars needed, so it runs on a bare GPU machine
with the model libraries carried as wheels.

    python benchmarks/gpu_section_check.py [--device cuda] [--tile 4] [--out report.json]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np
import soundfile as sf

from batch_assets.source.decode import to_target

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from report import cuda_peak_mib, emit  # noqa: E402

VARIANTS = {  # (reuse segmentation, cuda graphs, shared embedding trunk)
    "all_on": (True, True, True),
    "reuse_off": (False, True, True),
    "graphs_off": (True, False, True),
    "trunk_off": (True, True, False),
    "all_off": (False, False, False),
}


def sample_flight(tile: int) -> tuple[np.ndarray, list]:
    pieces, units, offset = [], [], 0
    from batch_assets.gpu.section.flight import SectionUnit
    from batch_assets.long_units.long_audio import sample_audio_paths

    paths = sample_audio_paths()
    for copy in range(tile):
        for path in paths:
            samples, rate = sf.read(path, dtype="float32", always_2d=True)
            audio = to_target(samples, rate)
            units.append(SectionUnit(f"{path.stem}-{copy}", offset, len(audio)))
            pieces.append(audio)
            offset += len(audio)
    return np.concatenate(pieces), units


def _difference(a, b) -> float:
    return float("inf") if b is None or len(a) != len(b) else float(np.max(np.abs(np.array(a) - np.array(b))))


def summary(outcomes) -> dict:
    return {
        o.unit_id: {
            "class": str(o.result_class),
            "regions": o.vad.regions if o.vad else None,
            "turns": o.diarization.turns if o.diarization else None,
            "embeddings": {k: v.tolist() for k, v in o.diarization.embeddings.items()} if o.diarization else None,
            "words": [(w.start_s, w.end_s, w.word, spk) for w, spk in o.words],
            "scores": [w.score for w, _ in o.words],
        }
        for o in outcomes
    }


def main() -> None:
    import torch

    from batch_assets.gpu.asr.transcribe import apply_decoder_mode
    from batch_assets.gpu.section.flight import process_flight
    from batch_assets.gpu.section.levers import Levers
    from batch_assets.gpu.section.loaded import load_models
    from batch_assets.gpu.section.stats import SectionStats

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tile", type=int, default=1, help="repeat the sample units this many times in the flight")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    models = load_models("builtin:tiny-tdt", "builtin:tiny-diarization", device)
    asr = models.asr
    models.language_id  # noqa: B018 (loaded before the timed variants, as the ASR model is)
    audio, units = sample_flight(args.tile)
    report = {"device": str(device), "torch": torch.__version__, "audio_s": len(audio) / 16000, "units": len(units),
              "model_load_s": round(models.load_seconds, 2), "variants": {}}
    results = {}
    for name, (reuse, graphs, trunk) in VARIANTS.items():
        name_asr = models.default_asr_name
        models.decoder_settings[name_asr] = apply_decoder_mode(asr, graphs, models.decoder_settings.get(name_asr))
        stats = SectionStats()
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        levers = Levers(vad_segmentation_reuse_enabled=reuse, asr_cuda_graphs_enabled=graphs,
                        embedding_shared_trunk_enabled=trunk)
        outcomes = process_flight(models, "flight-0000", audio, units, levers, stats)
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        results[name] = summary(outcomes)
        report["variants"][name] = {
            "reuse": reuse, "graphs": graphs, "shared_trunk": trunk, "section_s": round(wall, 3),
            "embedding_work": dict(stats.embedding_work),
            "stage_s": {k: round(v, 3) for k, v in stats.seconds.items()},
            "segmentation_forwards": dict(stats.segmentation_forwards),
            "decoder_modes": sorted(stats.decoder_modes),
            "reuse_outcomes": dict(stats.segmentation_reuse),
            "classes": {c: sum(1 for o in outcomes if str(o.result_class) == c)
                        for c in {str(o.result_class) for o in outcomes}},
            "words": sum(len(o.words) for o in outcomes),
            "audio_s_per_s": round(report["audio_s"] / wall, 1),
        }
        report["variants"][name]["cuda_peak_mib"] = cuda_peak_mib(torch, device)
    report["identical_to_all_on"] = {name: results[name] == results["all_on"] for name in VARIANTS}
    decisions = {name: {u: {k: v for k, v in r.items() if k not in ("embeddings", "scores")} for u, r in res.items()}
                 for name, res in results.items()}
    report["identical_to_all_on_but_embeddings_and_scores"] = {name: decisions[name] == decisions["all_on"]
                                                               for name in VARIANTS}
    report["max_score_difference_to_all_on"] = {
        name: max((_difference(r["scores"], results["all_on"][u]["scores"]) for u, r in results[name].items()
                   if r["scores"] and None not in r["scores"] + results["all_on"][u]["scores"]), default=0.0)
        for name in VARIANTS}
    report["max_embedding_difference_to_all_on"] = {  # the shared trunk's batch shapes may move the last float
        # bits on CUDA
        name: max((_difference(e, (results["all_on"][u]["embeddings"] or {}).get(label))
                   for u, r in results[name].items() if r["embeddings"] for label, e in r["embeddings"].items()),
                  default=0.0)
        for name in VARIANTS}
    emit(report, args.out)


if __name__ == "__main__":
    main()
