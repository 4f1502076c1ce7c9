"""A unit's language: codes and routing parsed strictly, sidecar > run config > detection, text without spaces.

No models and no Dagster run here (those are `test_language_id.py` and `test_languages_partition.py`): the
parsers, the precedence, the CLI's refusal before any work, and how words are joined in every export and in
`batch-assets show`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl
import pytest

from batch_assets.exports import formats as exports
from batch_assets.exports import transcript_text
from batch_assets.gpu.outputs.tables import WORDS_SCHEMA, segments_table
from batch_assets.ingest.speaker_hints import HintError, SpeakerHints, parse_sidecar, sidecar_language
from batch_assets.ingest.unit_language import DETECT, DeclaredLanguage, unit_language
from batch_assets.models.languages import (
    PARAKEET_JA,
    PARAKEET_V2,
    PARAKEET_V3,
    PARAKEET_V3_LANGUAGES,
    LanguageError,
    parse_routing,
    run_language,
)
from batch_assets.settings import SettingError, Settings


def test_the_routing_presets_and_entries():
    production = parse_routing("production")
    assert production["en"] == PARAKEET_V2 and production["ja"] == PARAKEET_JA
    assert len(PARAKEET_V3_LANGUAGES) == 25 and all(production[lang] == PARAKEET_V3
                                                     for lang in PARAKEET_V3_LANGUAGES if lang != "en")
    assert len(production) == 26
    assert parse_routing("builtin") == {"en": "builtin:tiny-tdt", "es": "builtin:tiny-tdt-es",
                                        "de": "builtin:tiny-tdt-de", "ja": "builtin:tiny-tdt-ja"}
    shaped = parse_routing("production,ja=builtin:parakeet-tdt_ctc-0.6b-ja-shaped")  # what the tests run for ja
    assert shaped["ja"] == "builtin:parakeet-tdt_ctc-0.6b-ja-shaped" and shaped["en"] == PARAKEET_V2
    custom = parse_routing(" production , ja = /models/ja.nemo, xh=/m/xh.nemo ")
    assert custom["ja"] == "/models/ja.nemo" and custom["xh"] == "/m/xh.nemo" and custom["en"] == PARAKEET_V2
    assert parse_routing("en=a.nemo,ES=b.nemo") == {"en": "a.nemo", "es": "b.nemo"}
    for spec, message in (("", "is empty"), ("english=x", "'english' is not an ISO 639-1"), ("en=", "no model"),
                          ("es=x,production", "neither a preset"), ("nope", "neither a preset")):
        with pytest.raises(LanguageError, match=message):
            parse_routing(spec, "BATCH_ASSETS_ASR_MODELS")


def test_a_bad_routing_variable_is_named():
    with pytest.raises(SettingError, match=r"BATCH_ASSETS_ASR_MODELS: 'english' is not an ISO 639-1"):
        Settings.from_env({"BATCH_ASSETS_ASR_MODELS": "english=x.nemo"})
    settings = Settings.from_env({"BATCH_ASSETS_ASR_MODELS": "builtin,fr=/m/fr.nemo", "BATCH_ASSETS_ASR_MODEL": "e"})
    assert settings.asr_models["fr"] == "/m/fr.nemo" and settings.asr_model == "e"


def test_a_run_language_is_auto_or_a_code_with_a_model():
    routing = parse_routing("builtin")
    assert run_language(None, routing, "x") is None and run_language(" AUTO ", routing, "x") is None
    assert run_language("ES", routing, "x") == "es"
    with pytest.raises(LanguageError, match=r"--language: 'xx' is not an ISO 639-1 language code"):
        run_language("xx", routing, "--language")
    with pytest.raises(LanguageError, match=r"no ASR model for language 'fr'; configured: de, en, es, ja"):
        run_language("fr", routing, "--language")


def test_sidecar_then_run_config_then_detection():
    row = {"relative_key": "calls/a.wav", "sidecar_language": None}
    assert unit_language(None, row) is DETECT
    assert unit_language("en", row) == DeclaredLanguage("en", "run_config")
    assert unit_language("en", row | {"sidecar_language": "ES"}) == DeclaredLanguage("es", "sidecar")
    bad = unit_language("en", row | {"sidecar_language": "spanish"})
    assert bad.language is None and "sidecar calls/a.wav.json language: 'spanish' is not an ISO 639-1" in bad.error
    # a valid code without a model is not an error here: the section publishes the unit unsupported_language
    assert unit_language(None, row | {"sidecar_language": "ja"}) == DeclaredLanguage("ja", "sidecar")


def test_a_sidecar_language_is_read_beside_the_hints_even_when_they_are_bad():
    assert parse_sidecar(b'{"num_speakers": 2, "language": "es"}', "a.wav.json") == SpeakerHints(num_speakers=2)
    assert sidecar_language(b'{"language": "es"}', "a.wav.json") == "es"
    assert sidecar_language(b'{"language": 7, "num_speakers": 0}', "a.wav.json") == "7"  # then refused, with a reason
    assert sidecar_language(b'{"num_speakers": 2}', "a.wav.json") is None
    assert sidecar_language(b"not json", "a.wav.json") is None
    with pytest.raises(HintError, match="positive integer"):
        parse_sidecar(b'{"num_speakers": 0, "language": "es"}', "a.wav.json")
    with pytest.raises(HintError, match="the keys are num_speakers, min_speakers, max_speakers, language"):
        parse_sidecar(b'{"lang": "es"}', "a.wav.json")


JA_WORDS = [("ja", 0, "SPEAKER_00", 0.5, 0.9, "きょう"), ("ja", 0, "SPEAKER_00", 1.0, 1.2, "は"),
            ("ja", 0, "SPEAKER_00", 1.3, 1.8, "いい"), ("ja", 1, "SPEAKER_01", 2.0, 2.6, "そう"),
            ("ja", 1, "SPEAKER_01", 2.7, 3.0, "です"), ("es", 0, "SPEAKER_00", 0.4, 0.8, "hola"),
            ("es", 0, "SPEAKER_00", 0.9, 1.3, "juan")]


def _words() -> pl.DataFrame:
    rows = [{"unit_id": u, "segment_index": s, "word_index": i, "start_s": a, "end_s": b, "word": w, "speaker": spk,
             "score": 0.9} for i, (u, s, spk, a, b, w) in enumerate(JA_WORDS)]
    return pl.DataFrame(rows, schema=WORDS_SCHEMA).with_columns(pl.col("word_index") - pl.col("word_index").min()
                                                                .over("unit_id"))


def test_words_of_a_language_without_spaces_are_joined_with_nothing_everywhere():
    words = _words()
    segments = segments_table(words, unspaced=["ja"])
    assert segments.filter(pl.col("unit_id") == "ja")["text"].to_list() == ["きょうはいい", "そうです"]
    assert segments.filter(pl.col("unit_id") == "es")["text"].to_list() == ["hola juan"]
    units = pl.DataFrame({"unit_id": ["ja", "es"], "source_uri": ["s/ja.wav", "s/es.wav"],
                          "result_class": ["transcribed"] * 2, "reason": ["", ""], "duration_s": [4.0, 2.0],
                          "num_words": [5, 2], "language": ["ja", "es"]})
    turns = pl.DataFrame(schema={"unit_id": pl.String, "start_s": pl.Float64, "end_s": pl.Float64,
                                 "speaker": pl.String, "exclusive": pl.Boolean})
    files = exports.partition_files(units, segments, words, turns)
    assert "[SPEAKER_00] きょうはいい\n" in files["ja.srt"] and "[SPEAKER_00] hola juan\n" in files["es.srt"]
    assert files["ja.vtt"].startswith("WEBVTT\nLanguage: ja\n\n") and "<v SPEAKER_01>そうです\n" in files["ja.vtt"]
    assert files["es.vtt"].startswith("WEBVTT\nLanguage: es\n\n")
    assert "]: きょうはいい\n" in files["ja.txt"]
    ja_json = json.loads(files["ja.json"])
    assert ja_json["language"] == "ja" and ja_json["segments"][0]["text"] == "きょうはいい"
    assert json.loads(files["es.json"])["language"] == "es"
    shown = transcript_text.partition_units(units, words, "ja")[0]
    assert shown[0].startswith("ja (transcribed, ja, 4.0 s, 5 words)") and shown[1].endswith("]: きょうはいい")
    # a unit whose language is unknown (a silent one): no header line, the JSON's language null
    assert exports.vtt(segments.clear(), words.clear()) == "WEBVTT\n"
    assert json.loads(exports.json_text(segments.clear(), words.clear()))["language"] is None


def test_the_cli_refuses_a_language_before_any_work(tmp_path):
    env = os.environ | {"DAGSTER_HOME": str(tmp_path), "BATCH_ASSETS_STORAGE_URL": str(tmp_path / "storage")}
    for code, message in (("xx", "--language: 'xx' is not an ISO 639-1 language code"),
                          ("fr", "--language: no ASR model for language 'fr'; configured: de, en, es, ja")):
        probe = subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", "--language", code],
                               capture_output=True, text=True, env=env, timeout=120)
        assert probe.returncode == 2 and message in probe.stderr, probe.stderr
    assert not (tmp_path / "storage").exists()  # nothing ran: no ingest, no table
