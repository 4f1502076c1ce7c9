"""The builtin models' names: a leaf module, so the settings can default to them without importing the builders."""

BUILTIN_PREFIX = "builtin:"
TINY_TDT = "builtin:tiny-tdt"
TINY_DIARIZATION = "builtin:tiny-diarization"


def is_builtin(name: str) -> bool:
    return name.startswith(BUILTIN_PREFIX)
