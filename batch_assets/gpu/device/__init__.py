"""The device and how it fails: what every stage of the section shares about the hardware, no model in it.

`faults.py` (which errors are the device's, not the audio's: they fail the worker, never a unit), `precision.py`
(half precision, TF32, each model's matmul precision), `lock.py` (the cross-process lock around the section).

May import: nothing else in gpu/.
"""
