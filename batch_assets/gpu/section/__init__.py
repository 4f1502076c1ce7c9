"""The section: a flight's work on the device, stage by stage, with no Dagster. Assets, benchmarks and tests call it.

`runner.py` (`run_section`: flights in, one commit per flight, a report out), `flight.py` (one flight's device
work, VAD -> language -> diarization -> ASR, and host work, attribution), `levers.py` (the typed levers),
`loaded.py` (the models a worker holds), `routing.py` (each unit's language and ASR model), `asr_flight.py` (a
flight's ASR with one model, checked), `attribution.py` (each word's speaker), `flight_feed.py` (lever 1: the
next flights prepared in the background), `stats.py` (each stage's device and host seconds, its forwards),
`channels.py` (a unit read channel by channel: a piece per channel, merged back).

May import: gpu.adapters, gpu.asr, gpu.device, gpu.diarization.
"""
