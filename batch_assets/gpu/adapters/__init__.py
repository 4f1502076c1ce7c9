"""Every reach into the model libraries' private parts, one module per library, each pinned by a test that fails
loudly on an upgrade.

`pyannote_adapter.py` (pyannote.audio's segmentation `Inference`, embedding wrapper and model, `Audio` crops;
`tests/test_pyannote_adapter.py`), `nemo_adapter.py` (NeMo's `run_nvrtc` compile-log buffer kept off CPython's
shared `b" "`, `tests/test_nvrtc_log.py`; the TDT decoder's token durations kept per hypothesis,
`tests/test_batch_invariance.py`).

May import: nothing else in gpu/.
"""
