"""Long units: wall seconds, peak memory and speaker consistency per recording length, on the real pipeline.

For each length (default 0.5, 1, 2, 4 and 8 hours) a recording is built from the sample's synthetic dialogues
(`batch_assets/long_units/long_audio.py`: 4 known voices, every turn known), written as FLAC into a partition of its
own, and the partition is materialized (`fetched_audio`, `prepared_flights`, the GPU section) in a fresh process, so
that its peak RSS is the length's own. Reported per length: wall seconds of the run, the GPU step's peak RSS (the
run's process: the in-process executor runs every step in it, so this bounds the GPU step from above), windows,
speakers found against the true 4, DER (pyannote.metrics, no collar) and the share of words whose speaker is
the true voice (under DER's optimal speaker mapping). The baseline is the same dialogues as short units (one
unit each, one partition): the DER a long unit should stay within 2 points of.

    .venv/bin/python benchmarks/long_units.py                       # 0.5 1 2 4 8 h, builtin models, CPU, 2 threads
    .venv/bin/python benchmarks/long_units.py --hours 0.5 1 --out benchmarks/results/long_units.json
    .venv/bin/python benchmarks/long_units.py --hours 0.5 --levers exact "trunk blocks" "skip covered" approximate
    .venv/bin/python benchmarks/long_units.py --hours 1 4 --two-channel --out benchmarks/results/long_units_2ch.json

`--levers`: each case measured once per named set of approximate levers (`exact`: none; the default), so their
DER on the long-recording path (windows, stitched speakers) reads against the exact run's.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

PARTITION = "2026-03-01"


def build(hours: float, folder: pathlib.Path, seed: int, two_channel: bool = False) -> None:
    """Write one long recording and its truth (run in a process of its own: the whole recording is in memory).
    `two_channel`: as a call, each voice's turns on one channel (alice and carol on 0, bob and dave on 1), the truth
    the channels' speakers (`CHANNEL_0`, `CHANNEL_1`: the unit is read by channel)."""
    import numpy as np
    import soundfile as sf

    from batch_assets.long_units.long_audio import long_recording

    audio, turns = long_recording(hours * 3600, seed)
    if two_channel:
        voices = sorted({voice for _, _, voice in turns})
        channel = {voice: i % 2 for i, voice in enumerate(voices)}
        call = np.repeat(audio[:, None] * 0.05, 2, axis=1)  # the noise floor (and a faint echo) on both
        for start, end, voice in turns:
            span = slice(int(start * 16_000), int(end * 16_000))
            call[span, channel[voice]] = audio[span]
        audio, turns = call, [(start, end, f"CHANNEL_{channel[voice]}") for start, end, voice in turns]
    target = folder / "source" / PARTITION / "long" / f"recording_{hours:g}h.flac"
    target.parent.mkdir(parents=True, exist_ok=True)
    sf.write(target, audio, 16_000)
    (folder / "truth.json").write_text(json.dumps({"long__" + target.name: turns}))


def build_short(folder: pathlib.Path) -> None:
    """The same dialogues as short units: each sample dialogue a unit of its own."""
    import soundfile as sf

    from batch_assets.long_units.long_audio import sample_dialogues

    truth = {}
    for i, dialogue in enumerate(sample_dialogues()):
        name = f"dialogue_{i:02d}.flac"
        target = folder / "source" / PARTITION / "short" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        sf.write(target, dialogue.audio, 16_000)
        truth["short__" + name] = dialogue.turns
    (folder / "truth.json").write_text(json.dumps(truth))


LEVERS = {"exact": (), "trunk blocks": ("embedding_trunk_blocks_enabled",),
          "skip covered": ("embedding_skip_covered_enabled",),
          "approximate": ("embedding_trunk_blocks_enabled", "embedding_skip_covered_enabled")}


def measure(folder: pathlib.Path, threads: int, levers: str = "exact") -> dict:
    """Materialize the folder's partition, the approximate levers `levers` on (`LEVERS`), and score it against its
    truth (in a fresh process)."""
    import resource

    import dagster as dg
    import numpy as np
    import polars as pl

    from batch_assets.definitions import all_assets
    from batch_assets.gate.diarization_error import score, turns_by_unit
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.orchestration.io_manager import StorageJsonIOManager
    from batch_assets.storage.resource import StorageResource

    storage = StorageResource(source_url=str(folder / "source"),
                              storage_url=str(folder / f"storage-{levers.replace(' ', '-')}"))
    assets = [a for a in all_assets
              if {k.to_user_string() for k in a.keys} & {"fetched_audio", "prepared_flights", "transcripts"}]
    started = time.perf_counter()
    result = dg.materialize(assets, partition_key=PARTITION, instance=dg.DagsterInstance.ephemeral(),
                            run_config={"ops": {"gpu_section": {"config": dict.fromkeys(LEVERS[levers], True)}}},
                            resources={"storage": storage, "gpu_io": StorageJsonIOManager(storage=storage),
                                       "gpu": GpuResource(lock_dir=str(folder / "lock"), device="cpu",
                                                          torch_threads=threads)})
    wall = time.perf_counter() - started
    assert result.success
    truth = {uid: [(start, end, voice) for start, end, voice in turns]
             for uid, turns in json.loads((folder / "truth.json").read_text()).items()}
    units = storage.read_parquet("transcripts", PARTITION, "units")
    words = storage.read_parquet("transcripts", PARTITION, "words")
    plan = storage.read_parquet("prepared_flights", PARTITION, "plan")
    der = score(truth, turns_by_unit(storage.read_parquet("diarization", PARTITION, "turns")))
    agree = total = 0
    for uid, true_turns in truth.items():
        mapping = der.mappings[uid]  # a found speaker -> the true voice, DER's optimal mapping
        starts = np.array([t[0] for t in true_turns])
        for row in words.filter(pl.col("unit_id") == uid).iter_rows(named=True):
            middle = (row["start_s"] + row["end_s"]) / 2
            i = int(np.searchsorted(starts, middle, side="right")) - 1
            if i >= 0 and true_turns[i][0] <= middle <= true_turns[i][1]:
                total += 1
                agree += mapping.get(row["speaker"]) == true_turns[i][2]
    metadata = next(e.materialization.metadata for e in result.get_asset_materialization_events()
                    if e.asset_key == dg.AssetKey("transcripts"))
    return {
        "audio_s": round(float(units["duration_s"].sum()), 1),
        "units": len(units),
        "wall_s": round(wall, 1),
        "gpu_step_peak_rss_mib": metadata["gpu_step_peak_rss_mib"].value,
        "process_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "windows": int(plan["window"].is_not_null().sum()),
        "speakers_found": int(units["num_speakers"].max()),
        "true_speakers": len({v for t in truth.values() for _, _, v in t}),
        "der_percent": round(100 * der.rate, 2),
        "word_speaker_agreement": round(agree / total, 4) if total else None,
        "words": len(words),
    }


def _child(*args: str) -> dict | None:
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{args}: failed\n{out.stderr[-3000:]}")
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, nargs="+", default=[0.5, 1, 2, 4, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--out", default="benchmarks/results/long_units.json")
    parser.add_argument("--build", nargs=2, metavar=("HOURS", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--build-short", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--levers", nargs="+", choices=sorted(LEVERS), default=["exact"],
                        help="measure each case with these approximate levers on (exact: none), each on its own")
    parser.add_argument("--measure", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--two-channel", action="store_true",
                        help="each recording a two-channel call, read by channel (no short-units case)")
    args = parser.parse_args()
    if args.build:
        return build(float(args.build[0]), pathlib.Path(args.build[1]), args.seed, args.two_channel)
    if args.build_short:
        return build_short(pathlib.Path(args.build_short))
    if args.measure:
        print(json.dumps(measure(pathlib.Path(args.measure), args.threads, args.levers[0])))
        return None
    rows = []
    with tempfile.TemporaryDirectory(prefix="long-units-") as scratch:
        cases = [*([] if args.two_channel else [("short units", None)]), *((f"{h:g} h", h) for h in args.hours)]
        for label, hours in cases:
            folder = pathlib.Path(scratch) / label.replace(" ", "_")
            if hours is None:
                _child("--build-short", str(folder))
            else:
                _child("--build", str(hours), str(folder), "--seed", str(args.seed),
                       *(["--two-channel"] if args.two_channel else []))
            for levers in args.levers:
                row = {"case": label, "levers": levers} | _child("--measure", str(folder), "--threads",
                                                                 str(args.threads), "--levers", levers)
                rows.append(row)
                print(json.dumps(row), flush=True)
    columns = ["case", "levers", "audio_s", "units", "windows", "wall_s", "gpu_step_peak_rss_mib", "speakers_found",
               "true_speakers", "der_percent", "word_speaker_agreement"]
    print("\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
