"""batch_assets: recorded audio in, speaker-attributed word-timestamped transcripts out, as Dagster assets."""
