"""The closed set of per-unit result classes.

Every listed audio object ends in exactly one class, with a human-readable reason. Ingest decides the first six
(and `changed_since_listed`, when the object read to decode is not the one listed); the GPU section turns `ok`
into `silent` or `transcribed` (or `failed` when that one unit could not be processed, so one bad unit never
fails a partition; or `unsupported_language` when its language has no ASR model: never transcribed by another
language's model). A unit whose audio decoded shorter than its header declared (a file cut off in transit, say)
is processed for what decoded and classed `truncated`, its reason saying how much of how much.
"""

from __future__ import annotations

from enum import StrEnum


class ResultClass(StrEnum):
    OK = "ok"  # fetched and decodable; waiting for the GPU section
    EMPTY = "empty"  # zero bytes, or zero samples
    UNDECODABLE = "undecodable"  # corrupt, truncated, or not audio
    TOO_LONG = "too_long"  # longer than the safety limit (max_recording_seconds)
    FETCH_FAILED = "fetch_failed"  # storage kept failing after retries
    REJECTED_KEY = "rejected_key"  # object key would escape the storage root
    SILENT = "silent"  # no speech found by VAD: no words, by construction
    TRANSCRIBED = "transcribed"  # speech found, diarized and transcribed
    FAILED = "failed"  # the GPU section could not process this unit (reason says why)
    TRUNCATED = "truncated"  # decoded shorter than declared: what decoded was processed (reason: how much of how much)
    CHANGED_SINCE_LISTED = "changed_since_listed"  # other bytes (or a symlink) when read to decode: not decoded
    UNSUPPORTED_LANGUAGE = "unsupported_language"  # speech in a language no configured ASR model hears (reason: which)


INGEST_CLASSES = (
    ResultClass.OK,
    ResultClass.EMPTY,
    ResultClass.UNDECODABLE,
    ResultClass.TOO_LONG,
    ResultClass.FETCH_FAILED,
    ResultClass.REJECTED_KEY,
    ResultClass.CHANGED_SINCE_LISTED,
)
FINAL_CLASSES = tuple(c for c in ResultClass if c is not ResultClass.OK)
# The object was never read (storage kept failing, or it was not the object listed): never a final result. A commit
# holding such a unit is not reused by another run, the late-audio sensor asks for the unit again (once per
# identity), and a day whose every unit ended so fails the `units_accounted_for` check.
UNREAD_CLASSES = (ResultClass.FETCH_FAILED, ResultClass.CHANGED_SINCE_LISTED)

# The reason of a `silent` unit (the section's, and a windowed unit's whose every window was silent).
SILENT_REASON = "no speech detected by VAD"


# Decoded audio may fall short of the declared duration by this much before the unit counts as truncated
# (containers round their durations; resampling moves the last sample).
TRUNCATION_TOLERANCE_S = 1.0
TRUNCATION_TOLERANCE_SHARE = 0.02


def truncation(declared_s: float | None, decoded_s: float) -> str | None:
    """The reason a unit counts as truncated (decoded well short of its declared duration), or None."""
    if declared_s is None:
        return None
    missing = declared_s - decoded_s
    if missing <= max(TRUNCATION_TOLERANCE_S, TRUNCATION_TOLERANCE_SHARE * declared_s):
        return None
    return f"truncated: decoded {decoded_s:.1f} s of {declared_s:.1f} s declared ({missing:.1f} s missing)"
