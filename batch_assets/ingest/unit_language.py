"""A unit's language before the GPU section: declared by its sidecar, else by the run, else to be detected.

The order: a JSON sidecar's `language` (`call.flac.json`: `{"language": "es"}`, read into the manifest's
`sidecar_language`), then the run's (`ops.gpu_section.config.language`; `batch-assets run --language CODE`), else
`auto`: the GPU section detects it from the unit's speech (`gpu/asr/language_id.py`). A run's code is checked before any
work (`models/languages.py: run_language`); a sidecar's bad code fails that unit only, its reason naming the code.
A declared code with no ASR model is not an error: the unit is published `unsupported_language`.
"""

from __future__ import annotations

import dataclasses

from batch_assets.models.languages import LanguageError, check_code

SIDECAR, RUN_CONFIG, DETECTED = "sidecar", "run_config", "detected"  # `transcripts/units.language_source`


@dataclasses.dataclass(frozen=True)
class DeclaredLanguage:
    """A unit's language as known before the section: a code and its source, None to detect it, or an error."""

    language: str | None = None
    source: str | None = None
    error: str | None = None  # the unit fails with this reason


DETECT = DeclaredLanguage()


def unit_language(run_language: str | None, manifest_row: dict) -> DeclaredLanguage:
    """`run_language`: the run's checked code, None for `auto`; `manifest_row`: the unit's manifest row."""
    declared = manifest_row.get("sidecar_language")
    if declared is not None:
        try:
            return DeclaredLanguage(check_code(declared, f"sidecar {manifest_row.get('relative_key')}.json language"),
                                    SIDECAR)
        except LanguageError as error:
            return DeclaredLanguage(error=str(error))
    return DETECT if run_language is None else DeclaredLanguage(run_language, RUN_CONFIG)
