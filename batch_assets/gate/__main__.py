"""`python -m batch_assets.gate --baseline URL --candidate URL --partition YYYY-MM-DD [--exact] [...]`: print,
exit 1 on a failed bar."""

from __future__ import annotations

import argparse
import json
import sys

from batch_assets.gate.compare import gate
from batch_assets.storage.resource import StorageResource


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batch_assets.gate", description=__doc__)
    parser.add_argument("--baseline", required=True, help="storage root (fsspec URL) of the baseline run")
    parser.add_argument("--candidate", required=True, help="storage root (fsspec URL) of the candidate run")
    parser.add_argument("--partition", action="append", required=True)
    parser.add_argument("--exact", action="store_true",
                        help="also hold every published column: decisions identical, scores and embeddings within "
                             "their bounds (what the exact levers promise)")
    parser.add_argument("--json", action="store_true", help="also print the result as JSON")
    args = parser.parse_args(argv)
    result = gate(StorageResource(storage_url=args.baseline), StorageResource(storage_url=args.candidate),
                  args.partition, exact=args.exact)
    print(result.table())
    if args.json:
        print(json.dumps(result.as_dict()))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
