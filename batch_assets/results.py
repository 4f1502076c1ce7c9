"""The closed set of per-unit result classes.

Every listed audio object ends in exactly one class, with a human-readable reason. Ingest decides the
first five; the GPU section turns `ok` into `silent` or `transcribed` (or `failed` when that one unit
could not be processed, so one bad unit never fails a partition).
"""

from __future__ import annotations

from enum import StrEnum


class ResultClass(StrEnum):
    OK = "ok"  # fetched and decodable; waiting for the GPU section
    EMPTY = "empty"  # zero bytes, or zero samples
    UNDECODABLE = "undecodable"  # corrupt, truncated, or not audio
    TOO_LONG = "too_long"  # longer than the group limit
    FETCH_FAILED = "fetch_failed"  # storage kept failing after retries
    REJECTED_KEY = "rejected_key"  # object key would escape the storage root
    SILENT = "silent"  # no speech found by VAD: no words, by construction
    TRANSCRIBED = "transcribed"  # speech found, diarized and transcribed
    FAILED = "failed"  # the GPU section could not process this unit (reason says why)


INGEST_CLASSES = (
    ResultClass.OK,
    ResultClass.EMPTY,
    ResultClass.UNDECODABLE,
    ResultClass.TOO_LONG,
    ResultClass.FETCH_FAILED,
    ResultClass.REJECTED_KEY,
)
FINAL_CLASSES = tuple(c for c in ResultClass if c is not ResultClass.OK)
