"""`python -m batch_assets.gate --baseline URL --candidate URL --partition YYYY-MM-DD [--exact] [--truth FILE]`:
print, exit 1 on a failed bar."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from batch_assets.gate.compare import gate
from batch_assets.gate.diarization_error import read_truth
from batch_assets.storage.resource import StorageResource


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batch_assets.gate", description=__doc__)
    parser.add_argument("--baseline", required=True, help="storage root (fsspec URL) of the baseline run")
    parser.add_argument("--candidate", required=True, help="storage root (fsspec URL) of the candidate run")
    parser.add_argument("--partition", action="append", required=True)
    parser.add_argument("--exact", action="store_true",
                        help="also hold every published column: decisions identical, scores and embeddings within "
                             "their bounds (what the exact levers promise)")
    parser.add_argument("--truth", action="append", default=[], metavar="PARTITION=FILE",
                        help="a partition's true turns (sample_data/truth/<partition>.json, or {unit_id: [[start_s, "
                             "end_s, speaker], ...]}): hold the candidate's DER against them to at most 0.5 points "
                             "over the baseline's (the bar for the approximate levers); one per partition")
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    args = parser.parse_args(argv)
    truth = None
    if args.truth:
        pairs = [value.partition("=") for value in args.truth]
        if any(not sep or not file for _, sep, file in pairs):
            parser.error("--truth takes PARTITION=FILE, e.g. --truth 2026-01-15=sample_data/truth/2026-01-15.json")
        truth = {partition: read_truth(pathlib.Path(file)) for partition, _, file in pairs}
        if missing := sorted(set(args.partition) - set(truth)):
            parser.error(f"--truth: no true turns for partition(s) {', '.join(missing)} (one --truth per --partition)")
    try:
        result = gate(StorageResource(storage_url=args.baseline), StorageResource(storage_url=args.candidate),
                      args.partition, exact=args.exact, truth=truth)
    except ValueError as error:  # a truth of other units
        parser.error(f"--truth: {error}")
    print(result.table())
    if args.json:
        print(json.dumps(result.as_dict()))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
