"""Reading a source object: one room that both the listing (`ingest/manifest.py`, the late-audio sensor's
`ingest/late_audio.py`) and the GPU step (`gpu/steps/shard_work.py`) call. No Dagster.

The map, in the order a byte travels:
- `identity.py`: what identifies an object's bytes without reading them (size; S3 ETag and VersionId; a local
  file's mtime), stored as typed manifest columns and compared on what both sides carry;
- `fetch.py`: retries (`RetryPolicy`, `with_retries`, the run's policy for the GPU step: `retries_of_run`), the
  errors that class a unit (`FetchError`, `ChangedSinceListed`), a local file opened without following symlinks;
- `objects.py`: an object's head read in ranges (`opened`) and its body read once (`read_once`), each tied to the
  identity it was listed with (S3: If-Match and VersionId; locally: size and mtime before and after);
- `containers.py`, `header_probe.py`: rate, channels and length from 8 KiB blocks of the head and tail, or an
  estimate where the container states none (`duration_estimated`);
- `ffmpeg.py`: the bundled ffmpeg's word on a file (rate, channels, length or an estimate) and its decode of one;
- `decode.py`: libsndfile or ffmpeg to 16 kHz mono float32, to the end of the stream (and each channel beside the
  mix, for a unit that may be read by channel);
- `channels.py`: how a unit's channels are read (`auto` decides on sound frames), a channel's own speech;
- `pieces.py`, `flight_audio.py`, `window_stream.py`: the GPU step's flights, each object read once and decoded
  (whole, or streaming into a long unit's windows; a unit longer than its plan's room measured, not held).
"""
