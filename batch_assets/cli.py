"""`batch-assets run`: materialize all five assets for a partition and print a short summary.

Runs on the embedded default: local files (the bundled sample partition unless
BATCH_ASSETS_SOURCE_URL says otherwise), the SQLite instance under `dagster_home/` (so the runs show up
in `dagster dev` afterwards), and the offline builtin models.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from batch_assets.partitions import SAMPLE_PARTITION
from batch_assets.storage import REPO_ROOT


def _summary(storage, partition: str, wall_s: float) -> str:
    import polars as pl

    units = storage.read_parquet("transcripts", partition, "units")
    words = storage.read_parquet("transcripts", partition, "words")
    lines = [f"partition {partition}: {len(units)} units, {len(words)} words, run took {wall_s:.1f} s", ""]
    for row in units.sort("unit_id").iter_rows(named=True):
        duration = f"{row['duration_s']:.1f}s" if row["duration_s"] is not None else "-"
        speakers = row["num_speakers"] if row["num_speakers"] is not None else "-"
        text = (row["text"] or row["reason"] or "")[:70]
        lines.append(f"  {row['unit_id'][:40]:40s} {row['result_class']:12s} {duration:>7s} spk={speakers} words={row['num_words']:<4d} {text}")
    by_class = units.group_by("result_class").len().sort("result_class")
    lines.append("")
    lines.append("  by class: " + ", ".join(f"{r['result_class']}={r['len']}" for r in by_class.iter_rows(named=True)))
    first = words.filter(pl.col("unit_id") == words["unit_id"][0]).head(12) if len(words) else words
    if len(first):
        lines.append(f"  first words of {first['unit_id'][0]}: " + " ".join(
            f"[{r['speaker']} {r['start_s']:.2f}] {r['word']}" for r in first.iter_rows(named=True)))
    lines.append(f"  tables under {storage.storage_url}/{{fetched_audio,prepared_flights,vad_scores,diarization,transcripts}}/{partition}/")
    return "\n".join(lines)


def run(partition: str, last: str | None = None) -> int:
    """Materialize one partition, or (with `last`) every partition from `partition` to `last` in one run,
    as a backfill run does: the models are loaded once for all of them."""
    os.environ.setdefault("DAGSTER_HOME", str(REPO_ROOT / "dagster_home"))
    import dagster as dg

    from batch_assets.definitions import all_assets, defs
    from batch_assets.partitions import daily_partitions

    resources = defs.resources
    if last is None:
        target = {"partition_key": partition}
        partitions = [partition]
    else:
        target = {"tags": {"dagster/asset_partition_range_start": partition, "dagster/asset_partition_range_end": last}}
        partitions = daily_partitions.get_partition_keys_in_range(dg.PartitionKeyRange(partition, last))
    started = time.perf_counter()
    result = dg.materialize(all_assets, resources=resources, instance=dg.DagsterInstance.get(), **target)
    wall_s = time.perf_counter() - started
    if not result.success:
        print(f"run {result.run_id} failed", file=sys.stderr)
        return 1
    for key in partitions:
        print(_summary(resources["storage"], key, wall_s))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="batch-assets", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="materialize all five assets for one partition and print a summary")
    run_parser.add_argument("--partition", default=SAMPLE_PARTITION, help=f"YYYY-MM-DD (default: the sample, {SAMPLE_PARTITION})")
    run_parser.add_argument("--through", help="YYYY-MM-DD: run every partition from --partition to this one in one run")
    args = parser.parse_args(argv)
    return run(args.partition, args.through)


if __name__ == "__main__":
    raise SystemExit(main())
