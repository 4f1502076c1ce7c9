"""The late-audio sensor's listing of one day of `--objects` objects (10,000), locally and on S3 (moto on loopback).

What a tick costs per day (`orchestration/late_audio.py`): `list_versions` (locally a walk and one `lstat` per
file; on S3 one LIST per 1,000 keys, no object opened) and `late_changes` against a manifest of the same objects
(nothing changed: the common case). The objects are tiny `.wav` files: a listing never reads them. Each
measurement is the best of `--repeat`; S3 through moto's server on loopback, which is slower than S3 per request
and has no network latency, so the S3 figure says what our side costs, not what a bucket across a network does.

    .venv/bin/python benchmarks/late_audio_listing.py [--objects 10000] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time

import polars as pl

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from report import emit  # noqa: E402

from batch_assets.ingest.late_audio import late_changes, list_versions  # noqa: E402
from batch_assets.ingest.manifest import MANIFEST_SCHEMA  # noqa: E402
from batch_assets.ingest.units import unit_ids  # noqa: E402

DAY = "2026-01-15"


def keys(n: int) -> list[str]:
    return [f"calls/{i // 500:03d}/call_{i:05d}.wav" for i in range(n)]


def manifest_of(listed: dict) -> pl.DataFrame:
    """A manifest holding exactly the listed objects, as `fetched_audio` would have recorded them."""
    rels = sorted(listed)
    return pl.DataFrame([{"unit_id": uid, "relative_key": rel, **listed[rel].columns(),
                          "result_class": "transcribed", "reason": ""}
                         for rel, uid in zip(rels, unit_ids(rels), strict=True)], schema=MANIFEST_SCHEMA)


def measure(fs, path: str, repeat: int) -> dict:
    listed = list_versions(fs, path)
    manifest = manifest_of(listed)
    published = dict.fromkeys(manifest["unit_id"], "transcribed")
    best_list, best_compare = float("inf"), float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        listed = list_versions(fs, path)
        listed_at = time.perf_counter()
        changes = late_changes(DAY, listed, manifest, published)
        best_list = min(best_list, listed_at - started)
        best_compare = min(best_compare, time.perf_counter() - listed_at)
    assert changes.listed == len(manifest) and not changes.units and not changes.gone, changes.describe()
    total = best_list + best_compare
    return {"objects": changes.listed, "list_s": round(best_list, 3), "compare_s": round(best_compare, 3),
            "objects_per_s": round(changes.listed / total)}


def local_day(root: pathlib.Path, n: int) -> str:
    for key in keys(n):
        path = root / DAY / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"RIFF")
    return str(root / DAY)


def s3_day(n: int):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from tests.s3_server import S3Server

    server = S3Server().__enter__()
    client = server.client()
    client.create_bucket(Bucket="listing")
    started = time.perf_counter()
    for key in keys(n):
        client.put_object(Bucket="listing", Key=f"rec/{DAY}/{key}", Body=b"RIFF")
    print(f"uploaded {n} objects to moto in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    storage = server.storage("listing")
    return server, storage.filesystem(f"s3://listing/rec/{DAY}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    from fsspec.implementations.local import LocalFileSystem

    with tempfile.TemporaryDirectory() as tmp:
        local = measure(LocalFileSystem(), local_day(pathlib.Path(tmp), args.objects), args.repeat)
    server, (fs, path) = s3_day(args.objects)
    try:
        s3 = measure(fs, path, args.repeat)
    finally:
        server.__exit__(None, None, None)
    emit({"benchmark": "late_audio_listing", "machine": "2-core CPU", "objects_per_day": args.objects,
          "local": local, "s3_moto_loopback": s3}, args.json)


if __name__ == "__main__":
    main()
