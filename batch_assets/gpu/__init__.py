"""The GPU section: VAD -> language -> diarization -> ASR for each flight of a partition, in shards of GPU steps.

Where things are (each room's `__init__` says what it holds and what it may import):

    gpu/
      assets.py        the multi-asset `gpu_section` and its five ops: thin glue over steps/
      steps/           the Dagster steps' work: run config, GpuResource, shards, resume, shard and leftover
                       steps, assembly, metadata, progress, stop requests
      outputs/         the published tables, each flight's commit of them, what made a commit
      section/         the Dagster-free core: run_section, a flight's device and host work, levers, loaded
                       models, language routing, a flight's ASR, attribution, the stats
      diarization/     pyannote: VAD, the levered pipeline, the forwards precomputed for levers 5 and 6, lever 5's
                       segmentation batches
        embeddings/    the embedding step's paths behind one interface, chosen in one place
      asr/             NeMo: TDT transcription and decoder modes, the decoder check, language identification
      adapters/        every reach into pyannote's and NeMo's private parts
      device/          faults, precision, the device lock

Imports point down this list and never up: assets.py -> steps -> outputs -> section -> diarization, asr ->
adapters, device (`tests/test_layout.py` holds each room to what its docstring names).

"The GPU section" is the whole of it (the `gpu_section` multi-asset); `section/` is its Dagster-free core, the
part that runs flights (`run_section`, `SectionStats`).
"""
