"""Diarization on pyannote: VAD, the levered pipeline, a flight's segmentation batches, the embedding paths.

`vad.py` (speech regions from the segmentation model's raw scores), `pipeline.py` (pyannote's `SpeakerDiarization`
with the levers as overrides of its public steps, a unit's `DiarizationCall`, the units' calls), `precompute.py` (a
flight's forwards done before its calls: levers 5 and 6), `flight_batch.py` (lever 5's segmentation forwards batched
across a flight's units), `embeddings/` (the embedding step's paths behind one interface, chosen in one place).

May import: gpu.adapters, gpu.device.
"""
