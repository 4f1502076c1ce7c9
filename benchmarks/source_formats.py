"""Benchmark issue 64: the files and buckets users have, read as the listing and the GPU step read them.

- **Units read whole / listed, per bucket kind**: the recorder day (`tests/recorder_files.py`: 15 files that
  recorders, phones, browsers and meeting tools write, plus the dialogue they were made from) on a real S3 API
  (moto on loopback) whose bucket never kept versions, keeps them, kept them and stopped, and one whose ETags are
  not MD5s (SSE-KMS's, answered by the test proxy); each object listed (`build_manifest`) and read and decoded as
  the GPU step does (`flight_source`): a unit counts when it decoded whole (within 1 s of what it holds).
- **Header bytes per object** (median, max) and **source bytes read / source size** on that day of small
  objects (its header reads plus each object read once).
- **Decode CPU seconds per audio-hour** per container, and ffmpeg against libsndfile where both read it (WAV,
  FLAC, Ogg, MP3), one thread, decoding to 16 kHz mono as the GPU step does.

    .venv/bin/python benchmarks/source_formats.py --json benchmarks/results/cpu_source_formats.json

`--seconds` cuts the dialogue (49.8 s) shorter; the decode cost loops it to `--decode-seconds` (300) per file, each
decoded `--decode-repeats` times.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import resource
import statistics
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DAY = "2026-03-01"


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (ffmpeg)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def read_day(storage) -> dict:
    """The day listed and read as the GPU step reads it: units whole / listed, header and whole-read bytes."""
    import polars as pl

    from batch_assets.ingest.manifest import build_manifest
    from batch_assets.ingest.prepare import prepare_flights
    from batch_assets.source.flight_audio import flight_source

    fs, path = storage.filesystem(storage.source_partition_url(DAY))
    manifest, skipped = build_manifest(fs, path, 7200.0, 4)
    ok = manifest.filter(pl.col("result_class") == "ok")
    plan, flights = prepare_flights(ok, budget_s=1800.0, max_units=32)
    source = flight_source(plan, ok, storage.filesystem, 4)
    pieces = {}
    for flight_id in flights["flight_id"]:
        pieces |= source.load(flight_id).pieces
    whole = [p for p in pieces.values() if p.problem is None and not p.truncated]
    probe = [b for b in manifest["probe_bytes"].to_list() if b is not None]
    return {"listed": manifest.height + skipped.height, "read_whole": len(whole),
            "classes": {f"{k}": v for k, v in manifest.group_by("result_class").len().iter_rows()},
            "problems": sorted({p.problem[0] for p in pieces.values() if p.problem}),
            "header_bytes": probe, "whole_bytes": sum(p.bytes_read for p in pieces.values()),
            "source_bytes": int(manifest["bytes"].sum())}


def bucket_kinds(folder: pathlib.Path) -> dict:
    from tests.s3_server import S3Server

    out = {}
    with S3Server() as s3:
        client = s3.client()
        for kind in ("unversioned", "versioned", "suspended", "sse-kms-etags"):
            bucket = f"bench-{kind}"
            s3.bucket(bucket, "Enabled" if kind in ("versioned", "suspended") else None)
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                extra = {"ServerSideEncryption": "AES256"} if kind == "sse-kms-etags" else {}
                client.put_object(Bucket=bucket, Key=f"audio/{DAY}/{path.relative_to(folder).as_posix()}",
                                  Body=path.read_bytes(), **extra)
            if kind == "suspended":
                client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
            s3.proxy.opaque_etags = kind == "sse-kms-etags"
            storage = s3.storage(bucket, faulty=True, source="audio")
            day = read_day(storage)
            out[kind] = {"read_whole": day["read_whole"], "listed": day["listed"], "problems": day["problems"]}
            print(f"{kind:14s} read whole {day['read_whole']} / listed {day['listed']}")
    return out


def header_reads(folder: pathlib.Path) -> dict:
    from batch_assets.storage.resource import StorageResource

    day = read_day(StorageResource(source_url=str(folder.parent)))
    probe = day["header_bytes"]
    read = (sum(probe) + day["whole_bytes"]) / day["source_bytes"]
    result = {"objects": len(probe), "source_bytes": day["source_bytes"],
              "header_bytes_median": statistics.median(probe), "header_bytes_max": max(probe),
              "header_bytes_total": sum(probe),
              "source_read_over_size": round(read, 3)}
    print(f"header bytes per object: median {result['header_bytes_median']:.0f}, max {result['header_bytes_max']}; "
          f"source read / size {result['source_read_over_size']}")
    return result


def decode_costs(folder: pathlib.Path, repeats: int) -> dict:
    """CPU s per audio-hour of each file through `decode_file` (the decoder the GPU step picks), and for WAV, FLAC,
    Ogg and MP3 through each decoder."""
    import torch

    from batch_assets.source import decode

    torch.set_num_threads(1)

    def cost(run) -> float:
        before, seconds = _cpu_s(), 0.0
        for _ in range(repeats):
            samples = run()
            seconds += len(samples) / decode.TARGET_SAMPLE_RATE
        return round((_cpu_s() - before) / seconds * 3600, 1)

    out: dict[str, dict] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key, suffix = path.relative_to(folder).as_posix(), path.suffix.lower()
        name = str(path)
        row = {"picked": cost(lambda: decode.decode_file(name, suffix)[0])}  # noqa: B023 - called at once
        if suffix in decode.SOUNDFILE_EXTENSIONS:
            row["ffmpeg"] = cost(lambda: _ffmpeg_only(decode, name))  # noqa: B023
            try:
                row["libsndfile"] = cost(lambda: decode._soundfile_decode(name, suffix)[0])  # noqa: B023
            except Exception as error:  # noqa: BLE001 - a length libsndfile does not trust: it is not the decoder
                row["libsndfile"] = f"not used: {error}"[:80]
        out[key] = row
        print(f"{key:28s} {json.dumps(row)}")
    return out


def _ffmpeg_only(decode, path: str):
    with decode._ffmpeg_fallback(path, decode.UntrustedLength("measured")) as stream:
        resampled = decode._Resampled(stream.info.sample_rate, stream.info.frames)
        for block in stream:
            resampled.add(block)
        return resampled.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=None, help="cut the dialogue to this long (default: whole)")
    parser.add_argument("--decode-seconds", type=float, default=300.0, help="each file's length for the decode cost")
    parser.add_argument("--decode-repeats", type=int, default=2)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    from tests.recorder_files import write_recorder_day

    with tempfile.TemporaryDirectory() as scratch:
        folder, long = pathlib.Path(scratch) / DAY, pathlib.Path(scratch) / "long" / DAY
        write_recorder_day(folder, args.seconds)
        write_recorder_day(long, args.decode_seconds)  # long enough that ffmpeg's start-up is not what is measured
        result = {"objects": len([p for p in folder.rglob("*") if p.is_file()]), "seconds": args.seconds or 49.79,
                  "bucket_kinds": bucket_kinds(folder), "header_reads": header_reads(folder),
                  "decode_seconds": args.decode_seconds,
                  "decode_cpu_s_per_audio_hour": decode_costs(long, args.decode_repeats)}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
