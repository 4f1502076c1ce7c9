"""Japanese end to end below the job: the builtin Japanese model (`builtin:tiny-tdt-ja`) on voices and sentences it
never heard, its words the model's tokens with times; the production-shaped hybrid TDT-CTC model
(`builtin:parakeet-tdt_ctc-0.6b-ja-shaped`, NeMo's `EncDecHybridRNNTCTCBPEModel`) through the section: its TDT head
chosen and asserted, CUDA graphs requested and refused on this CPU, the same words with every lever off, its
exports, and the English unit of its flight unchanged by routing Japanese to it. The sample partition's Japanese
call end to end: `test_languages_partition.py`."""

from __future__ import annotations

import collections
import dataclasses
import json

import numpy as np
import polars as pl
import pytest
import torch

from batch_assets.gpu.asr.transcribe import (
    DecoderModeError,
    Segment,
    apply_decoder_mode,
    check_decoder_mode,
    transcribe_segments,
)
from batch_assets.gpu.section.levers import Levers
from batch_assets.ingest.unit_language import DeclaredLanguage
from batch_assets.models.languages import TINY_TDT_JA
from batch_assets.models.production_shaped import PARAKEET_JA_SHAPED, SHAPED_ASR
from batch_assets.schema.results import ResultClass

from .test_languages_partition import sample_flight, similarity

CPU = torch.device("cpu")
SIMILARITY_BAR = 0.5  # the target: character similarity to the spoken kana (measured: docs/languages.md)


def test_builtin_japanese_model_hears_held_out_voices_and_its_words_are_tokens_with_times():
    """Sentences drawn with a seed no training split used, in the three voices training held out, each spoken with
    and without its spaces; through the section's ASR call with the unit's words as tokens."""
    from batch_assets.gpu.section.loaded import load_asr
    from batch_assets.models.sentences import make_sentences
    from batch_assets.training.corpus import VOICES, synthesize

    model = load_asr(TINY_TDT_JA, CPU)
    apply_decoder_mode(model, True, None)
    sentences = make_sentences(12, np.random.default_rng(4747), vocabulary=5000, lengths=(3, 8), language="ja")
    spoken = synthesize(sentences, list(VOICES["ja"].held_out), seed=4747, language="ja")
    audio = {f"u{i}": u.audio for i, u in enumerate(spoken)}
    segments = [Segment(uid, 0.0, len(a) / 16_000) for uid, a in audio.items()]
    words = transcribe_segments(model, audio, segments, 8, token_units=frozenset(audio))
    as_words = transcribe_segments(model, audio, segments, 8)  # NeMo's words: a whole unspaced segment each
    by_unit: dict[str, list] = collections.defaultdict(list)
    for word in words:
        by_unit[word.unit_id].append(word)
    scores = []
    for i, utterance in enumerate(spoken):
        unit = by_unit[f"u{i}"]
        assert " " not in utterance.text and unit, utterance
        starts = [w.start_s for w in unit]
        assert starts == sorted(starts) and all(0 <= w.start_s <= w.end_s <= segments[i].end_s for w in unit)
        assert all(w.word and " " not in w.word and w.score is not None for w in unit)
        scores.append(similarity(utterance.text, "".join(w.word for w in unit)))
    assert len(words) > 2 * len(as_words)  # tokens, not one "word" per sentence
    assert "".join(w.word for w in as_words) == "".join(w.word for w in words)  # the same text either way
    print(f"builtin:tiny-tdt-ja on held-out voices: character similarity {np.mean(scores):.3f} "
          f"(min {min(scores):.3f}) over {len(scores)} sentences")
    assert np.mean(scores) >= SIMILARITY_BAR and sorted(scores)[len(scores) // 2] >= SIMILARITY_BAR


def _ja_flight(models, levers: Levers, with_japanese: bool = True):
    """The sample's Japanese call (declared, as a sidecar would) and English call (detected), as one flight."""
    japanese = [("calls/ja_call.wav", DeclaredLanguage("ja", "sidecar"))] if with_japanese else []
    return sample_flight(models, [*japanese, ("calls/en_call.wav", None)], levers)


def _word_key(outcome) -> list[tuple]:
    return [(w.word, w.start_s, w.end_s, w.score, speaker) for w, speaker in outcome.words]


@pytest.fixture(scope="module")
def ja_models(lock_dir):
    from batch_assets.gpu.steps.resources import GpuResource

    models = GpuResource(device="cpu", lock_dir=str(lock_dir)).models
    return dataclasses.replace(models, routing=models.routing | {"ja": PARAKEET_JA_SHAPED},
                               asr_models=dict(models.asr_models), asr_loads=collections.Counter(),
                               decoder_settings={})


@pytest.mark.slow
def test_ja_shaped_hybrid_decodes_with_its_tdt_head_through_the_section(ja_models):
    model = ja_models.asr_model(PARAKEET_JA_SHAPED)
    shape = SHAPED_ASR[PARAKEET_JA_SHAPED]
    assert type(model).__name__ == "EncDecHybridRNNTCTCBPEModel" and not model.training
    assert (len(model.encoder.layers), model.encoder.d_model, model.encoder._feat_in) == (24, 1024, shape.features)
    assert model.tokenizer.vocab_size == shape.vocabulary == 3072
    assert model.ctc_decoder.num_classes_with_blank == 3073 and model.ctc_loss_weight == 0.3
    assert 0.6e9 < sum(p.numel() for p in model.parameters()) < 0.65e9

    # its CTC head chosen behind the section's back: refused before a call, then the TDT head chosen again
    settings = apply_decoder_mode(model, True, None)
    assert settings["head"] == "transducer" and model.cur_decoder == "rnnt"
    model.change_decoding_strategy(decoder_type="ctc", verbose=False)
    with pytest.raises(DecoderModeError, match="the ctc head decodes, not the transducer"):
        check_decoder_mode(model, CPU, True, "before")
    with pytest.raises(DecoderModeError, match="changed behind the section's back"):
        apply_decoder_mode(model, True, settings)
    apply_decoder_mode(model, True, None)
    assert model.cur_decoder == "rnnt"

    on, on_stats = _ja_flight(ja_models, Levers())
    off, off_stats = _ja_flight(ja_models, Levers(**{f.name: False for f in dataclasses.fields(Levers)
                                                     if f.name.endswith("_enabled")}))
    ja = on["calls/ja_call.wav"]
    assert (ja.result_class, ja.language, ja.asr_model) == (ResultClass.TRANSCRIBED, "ja", PARAKEET_JA_SHAPED)
    assert ja.words and all(0.0 <= w.start_s <= w.end_s <= ja.duration_s for w, _ in ja.words)
    assert all(" " not in w.word for w, _ in ja.words)  # tokens: the transcript joins them with nothing between
    assert on_stats.decoder_modes == {"eager (cuda graphs unavailable on cpu)"} and off_stats.decoder_modes == {
        "eager"}
    assert _word_key(ja) == _word_key(off["calls/ja_call.wav"])  # the levers on or off: the same words and times
    assert ja_models.asr_loads[PARAKEET_JA_SHAPED] == 1 and on_stats.asr_seconds_by_model[PARAKEET_JA_SHAPED] > 0

    # its exports, from the tables a commit keeps: the tokens joined with nothing, in every format, with their times
    from batch_assets.exports.formats import unit_files
    from batch_assets.gpu.outputs.tables import outcome_tables, segments_table, unspaced_units

    units, words = outcome_tables(list(on.values()))
    segments = segments_table(words, unspaced_units(units))
    text = units.filter(pl.col("unit_id") == ja.unit_id)["text"][0]
    assert text == "".join(w.word for w, _ in ja.words) and segments.filter(pl.col("unit_id") == ja.unit_id)[
        "text"].str.join("").item() == text
    files = unit_files(ja.unit_id, segments, words, pl.DataFrame(schema={"unit_id": pl.String}),
                       ("srt", "vtt", "txt", "json"), language="ja")
    exported = json.loads(files[f"{ja.unit_id}.json"])
    assert exported["language"] == "ja" and "".join(s["text"] for s in exported["segments"]) == text
    assert [w["word"] for s in exported["segments"] for w in s["words"]] == [w.word for w, _ in ja.words]
    assert files[f"{ja.unit_id}.vtt"].startswith("WEBVTT\nLanguage: ja\n\n") and " --> " in files[f"{ja.unit_id}.srt"]
    cue_text = [line for line in files[f"{ja.unit_id}.srt"].splitlines() if line.startswith("[SPEAKER")]
    assert cue_text and all(" " not in line.split("] ", 1)[1] for line in cue_text)

    # the English unit's results do not depend on Japanese being heard in its flight
    alone, _ = _ja_flight(ja_models, Levers(), with_japanese=False)
    assert _word_key(on["calls/en_call.wav"]) == _word_key(alone["calls/en_call.wav"]) and alone[
        "calls/en_call.wav"].words
