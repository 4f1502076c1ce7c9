"""The GPU section: VAD -> diarization -> ASR for each flight, inside one resource-locked section."""
