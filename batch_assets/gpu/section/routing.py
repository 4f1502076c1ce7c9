"""Which model hears each unit: the section's language stage.

`resolve_languages` gives each unit with speech its language (declared by its sidecar or the run, else detected
by the LID model: `language_id.py`) and the ASR model the routing names for it; a language with no model makes
the unit `unsupported_language`, its reason naming the language, how it was known and the configured languages.
The LID model loads on first need (its seconds: the `model_load` stage). No Dagster.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from batch_assets.gpu.asr.language_id import identify, speech_sample
from batch_assets.gpu.device.faults import raise_if_device_fault
from batch_assets.gpu.section.loaded import load_or_explain
from batch_assets.ingest.unit_language import DETECTED, DeclaredLanguage
from batch_assets.models.languages import describe_routing
from batch_assets.schema.results import ResultClass

if TYPE_CHECKING:
    from batch_assets.gpu.section.loaded import LoadedModels
    from batch_assets.gpu.section.stats import SectionStats


def resolve_languages(models: LoadedModels, waveforms: dict[str, np.ndarray], outcomes: dict[str, Any],
                      declared: dict[str, DeclaredLanguage], speech: list[str], stats: SectionStats) -> list[str]:
    """Each unit with speech gets its language (declared, else detected) and the ASR model for it; a language with
    no model makes the unit `unsupported_language`. `outcomes`: the flight's `flight.UnitOutcome`s by unit.
    Returns the units that go on to diarization and ASR, in order."""
    kept = []
    for uid in speech:
        outcome, language = outcomes[uid], declared[uid]
        if language.language is None:
            if not models.language_id_loaded:
                started = time.perf_counter()
                load_or_explain(f"language identification model {models.language_id_model!r}",
                                lambda: models.language_id,
                                "fix BATCH_ASSETS_LANGUAGE_ID_MODEL, or declare the language (--language)")
                stats.add("model_load", 0.0, time.perf_counter() - started)
            started = time.perf_counter()
            try:
                found = identify(models.language_id, models.device, speech_sample(waveforms[uid], outcome.vad.regions))
            except Exception as error:  # one unit's failure is that unit's result, unless the device's
                raise_if_device_fault(error, f"language identification of {uid}")
                outcome.result_class = ResultClass.FAILED
                outcome.reason = f"language identification: {type(error).__name__}: {error}"[:500]
                continue
            finally:
                stats.add("language_id", time.perf_counter() - started, 0.0)
            outcome.language, outcome.language_source, outcome.language_confidence = (found.language, DETECTED,
                                                                                      found.confidence)
        else:
            outcome.language, outcome.language_source = language.language, language.source
        outcome.asr_model = models.model_for(outcome.language)
        stats.languages[outcome.language] += 1
        if outcome.asr_model is None:
            how = (f"detected, confidence {outcome.language_confidence:.2f}" if outcome.language_source == DETECTED
                   else f"from the {outcome.language_source.replace('_', ' ')}")
            outcome.result_class = ResultClass.UNSUPPORTED_LANGUAGE
            outcome.reason = (f"no ASR model for language {outcome.language!r} ({how}); configured: "
                              f"{describe_routing(models.routing)} (BATCH_ASSETS_ASR_MODELS)")
            continue
        kept.append(uid)
    return kept
