"""`python -m batch_assets.cli ...`: the same command as `batch-assets ...`."""

from batch_assets.cli.commands import main

raise SystemExit(main())
