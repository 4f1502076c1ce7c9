"""Benchmark the CPU steps before the GPU: listing (`fetched_audio`) and planning (`prepared_flights`) seconds, the
header bytes the listing read, and peak memory, for a 1-audio-hour and a 4-audio-hour partition.

Since issue 55 these steps read headers and plan, no audio is decoded before the GPU steps (which fetch and decode
their own flights: `source/flight_audio.py`), so both should stay seconds, and flat in memory, as the day grows
(`benchmarks/streaming.py` measures the path end to end, and the decode's CPU cost per format).

Generates partitions of real speech (the sample dialogue, tiled) in mixed formats: 16 kHz mono WAV and
44.1 kHz stereo FLAC units of 15 minutes each. Each size runs `fetched_audio` + `prepared_flights` through
`dg.materialize` in a fresh process, which reports its own peak RSS.

    .venv/bin/python benchmarks/ingest.py                 # 1 h and 4 h; prints a table and JSON
    .venv/bin/python benchmarks/ingest.py --hours 1 2 8 --unit-minutes 10
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import soundfile as sf
import soxr

REPO = pathlib.Path(__file__).resolve().parents[1]
SPEECH = REPO / "sample_data" / "audio" / "2026-01-15" / "meetings" / "standup.wav"
PARTITION = "2026-03-01"


def generate(root: pathlib.Path, hours: float, unit_minutes: float) -> int:
    speech, rate = sf.read(SPEECH, dtype="float32")
    unit_samples = int(unit_minutes * 60 * rate)
    tiled = np.resize(speech, unit_samples)
    stereo_44k = soxr.resample(np.stack([tiled, 0.8 * tiled], axis=1), rate, 44100)
    units = max(1, int(round(hours * 60 / unit_minutes)))
    folder = root / PARTITION
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(units):
        if i % 2 == 0:
            sf.write(folder / f"unit_{i:03d}.wav", tiled, rate, subtype="PCM_16")
        else:
            sf.write(folder / f"unit_{i:03d}.flac", stereo_44k, 44100, subtype="PCM_16")
    return units


def child(source: str, storage: str) -> None:
    import dagster as dg

    from batch_assets.ingest.assets import fetched_audio, prepared_flights
    from batch_assets.storage.resource import StorageResource

    resources = {"storage": StorageResource(source_url=source, storage_url=storage)}
    timings = {}
    for asset in (fetched_audio, prepared_flights):
        started = time.perf_counter()
        result = dg.materialize([asset], partition_key=PARTITION, resources=resources,
                                instance=dg.DagsterInstance.ephemeral(), selection=None)
        assert result.success
        timings[asset.key.to_user_string()] = time.perf_counter() - started
    plan = resources["storage"].read_parquet("prepared_flights", PARTITION, "plan")
    flights = resources["storage"].read_parquet("prepared_flights", PARTITION, "flights")
    manifest = resources["storage"].read_parquet("fetched_audio", PARTITION, "manifest")
    print(json.dumps({
        "audio_s": float(plan["duration_s"].sum()),
        "flights": len(flights),
        "source_bytes": int(manifest["bytes"].sum()),
        "header_bytes_read": int(manifest["probe_bytes"].sum()),
        "list_s": timings["fetched_audio"],
        "plan_s": timings["prepared_flights"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--unit-minutes", type=float, default=15.0)
    parser.add_argument("--json", type=pathlib.Path, default=None)
    parser.add_argument("--child", nargs=2, metavar=("SOURCE", "STORAGE"))
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    rows = []
    for hours in args.hours:
        with tempfile.TemporaryDirectory() as source, tempfile.TemporaryDirectory() as storage:
            units = generate(pathlib.Path(source), hours, args.unit_minutes)
            out = subprocess.run([sys.executable, __file__, "--child", source, storage], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(out.stderr[-3000:])
            row = json.loads(out.stdout.strip().splitlines()[-1]) | {"hours": hours, "units": units}
            rows.append(row)
    print(f"{'partition':>10} {'units':>6} {'flights':>8} {'list s':>7} {'plan s':>7} {'header bytes read':>18} "
          f"{'of the source':>14} {'peak RSS MiB':>13}")
    for r in rows:
        print(f"{r['hours']:>8.1f} h {r['units']:>6d} {r['flights']:>8d} {r['list_s']:>7.1f} {r['plan_s']:>7.1f} "
              f"{r['header_bytes_read']:>18,d} {r['header_bytes_read'] / r['source_bytes']:>14.2e} "
              f"{r['peak_rss_mib']:>13.0f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
