"""The grammatical training sentences: in the vocabulary, seeded, and giving homophones their contexts."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from batch_assets.models.sentences import ASR_VOCABULARY_WORDS, common_words, outside_vocabulary
from batch_assets.training.grammar import lexicon, make_grammar_sentences


def test_sentences_are_seeded_distinct_and_in_the_vocabulary():
    first = make_grammar_sentences(400, np.random.default_rng(7), vocabulary=ASR_VOCABULARY_WORDS)
    again = make_grammar_sentences(400, np.random.default_rng(7), vocabulary=ASR_VOCABULARY_WORDS)
    other = make_grammar_sentences(400, np.random.default_rng(8), vocabulary=ASR_VOCABULARY_WORDS)
    assert first == again and first != other
    assert len(set(first)) == 400
    assert not outside_vocabulary(first, ASR_VOCABULARY_WORDS)
    assert all(2 <= len(s.split()) <= 16 for s in first)


def test_homophones_come_in_the_contexts_that_tell_them_apart():
    """What random word draws cannot teach: "their" before a noun phrase, "there" before a verb,
    "two" counting plurals; and "i" opening clauses."""
    lex = lexicon(common_words(ASR_VOCABULARY_WORDS))
    noun_phrase_words = set(lex.nouns) | set(lex.plurals) | set(lex.adjectives)
    sentences = make_grammar_sentences(3000, np.random.default_rng(0), vocabulary=ASR_VOCABULARY_WORDS)
    pairs = [(a, b) for s in sentences for a, b in zip(s.split(), s.split()[1:], strict=False)]
    after_their = [b for a, b in pairs if a == "their"]
    assert after_their and all(b in noun_phrase_words for b in after_their)
    assert sum(b in ("is", "are", "was", "were", "will") for a, b in pairs if a == "there") > 100
    assert sum(b in lex.plurals for a, b in pairs if a == "two") > 10
    assert sum(s.startswith("i ") for s in sentences) > 100
    assert len(lex.nouns) > 100 and len(lex.verbs) > 50 and len(lex.adjectives) > 20


def test_each_training_language_has_its_words_and_speaking_voices():
    """Spanish and German training text and voices: the language's own 500 most common words (its letters only),
    and every training and held-out voice speaks (espeak-ng writes audio for it). Japanese has fewer words written in
    kana alone among its most common: they are its words, and its transcripts run them together."""
    import subprocess

    from batch_assets.models.sentences import LETTERS, make_sentences, mix_pseudo_words
    from batch_assets.training.corpus import VOICES, join_utterances, synthesize

    english = make_sentences(3, np.random.default_rng(0), 500, language="en")
    assert make_sentences(3, np.random.default_rng(0), 500) == english  # the default is English, drawn as before
    for language, voices in VOICES.items():
        words = common_words(ASR_VOCABULARY_WORDS, language)
        assert len(set(words)) == len(words) == ASR_VOCABULARY_WORDS or (language == "ja" and len(set(words)) > 300)
        assert all(LETTERS[language].match(w) for w in words)
        assert not set(voices.held_out) & set(voices.train())
        for voice in [*voices.train(), *voices.held_out]:
            spoken = subprocess.run(["espeak-ng", "-v", voice, "--stdout", words[0]], capture_output=True, check=True)
            assert len(spoken.stdout) > 1000 and not spoken.stderr, voice
    spoken = synthesize(make_sentences(4, np.random.default_rng(1), 500, language="ja"), ["ja"], seed=1,
                        processes=1, language="ja")
    assert all(u.text and " " not in u.text and len(u.audio) > 8000 for u in spoken)
    joined = join_utterances(spoken, 3, seed=1, language="ja")  # runs of 1-3, joined by pauses of 0.3-1.2 s
    assert "".join(u.text for u in joined) == "".join(u.text for u in spoken) and len(joined) < len(spoken)
    pauses = sum(len(u.audio) for u in joined) - sum(len(u.audio) for u in spoken)
    assert 0.3 * 16000 * (len(spoken) - len(joined)) <= pauses <= 1.2 * 16000 * (len(spoken) - len(joined))
    made_up = mix_pseudo_words(["の に て は が"] * 20, 0.5, np.random.default_rng(3))
    new_words = {w for sentence in made_up for w in sentence.split()} - {"の", "に", "て", "は", "が"}
    assert new_words and all(re.fullmatch(r"[\u3041-\u3096]{2,}", w) for w in new_words)
    assert {"ñ", "á"} & set("".join(common_words(ASR_VOCABULARY_WORDS, "es")))
    assert {"ü", "ß", "ä"} & set("".join(common_words(ASR_VOCABULARY_WORDS, "de")))


SYNTHESIZE_AFTER_DAGSTER = """
import signal, sys
from dagster._utils.interrupts import capture_interrupts
with capture_interrupts():  # what every in-process Dagster execution does to its process's handlers
    pass
assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler, signal.getsignal(signal.SIGTERM)
from batch_assets.training.corpus import VOICES, synthesize
for seed in range(25):
    spoken = synthesize(["hello world", "good morning"] * 3, list(VOICES["en"].held_out), seed=seed)
    assert len(spoken) == 6
print("done", flush=True)
"""


@pytest.mark.slow  # a fresh interpreter, 25 worker pools
def test_speech_synthesis_ends_its_worker_pool_in_a_process_that_ran_dagster():
    """A make test-fast run hung for ever in `synthesize`: a test worker that had run Dagster in process has SIGTERM
    raising KeyboardInterrupt, its forked pool workers inherited that, and `Pool.terminate`'s SIGTERM raised inside
    an idle worker holding the task queue's lock (before the fix: KeyboardInterrupt tracebacks, then a hang within
    25 pools, measured here). Now the workers end by a close, with default signal handlers."""
    try:
        shown = subprocess.run([sys.executable, "-c", SYNTHESIZE_AFTER_DAGSTER], capture_output=True, text=True,
                               timeout=120)
    except subprocess.TimeoutExpired as hung:
        raise AssertionError(f"the worker pool hung: {(hung.stderr or b'')[-2000:]!r}") from None
    assert shown.returncode == 0 and "done" in shown.stdout, shown.stderr[-3000:]
    assert "KeyboardInterrupt" not in shown.stderr, shown.stderr[-3000:]
