"""The builtin models' names: a leaf module, so the settings can default to them without importing the builders."""

BUILTIN_PREFIX = "builtin:"
TINY_TDT = "builtin:tiny-tdt"
TINY_DIARIZATION = "builtin:tiny-diarization"
PARAKEET_SHAPED = "builtin:parakeet-tdt-0.6b-v2-shaped"  # `models/production_shaped.py`
COMMUNITY1_SHAPED = "builtin:community-1-shaped"
# the benches' model profiles: (ASR model, diarization pipeline)
MODEL_PROFILES = {"tiny": (TINY_TDT, TINY_DIARIZATION), "production-shaped": (PARAKEET_SHAPED, COMMUNITY1_SHAPED)}


def is_builtin(name: str) -> bool:
    return name.startswith(BUILTIN_PREFIX)
