"""NeMo's models on a flight's speech: ASR with TDT, its decoder modes, language identification.

`transcribe.py` (segments, batches, word timestamps and confidence, lever 3's decoder modes and their check),
`decoder_check.py` (the same segments decoded with CUDA graphs on and off, for the device checks),
`language_id.py` (a unit's language from its speech).

May import: gpu.adapters.
"""
