"""Sentences of common words: the text the builtin models' tokenizers and the training corpus share.

Sentences draw on a language's most frequent words (wordfreq's list, not a hand-typed one; English unless a
`language` is given: `LETTERS` says which words a language keeps), with a Zipf-like bias so frequent words
come up more often. Building a production-shaped model trains its tokenizer on them
(`production_shaped.py`); the training corpus speaks them (`training/corpus.py`).

Japanese has one more kind of word: made-up ones (`mix_pseudo_words`), a few hiragana morae each. Half the
kana-only words among its most common are katakana (loanwords), and most of its everyday words are written in
kanji, so a caller's kana is mostly words the list does not hold; made-up words teach the model to write what it
hears in hiragana rather than guess a known word.
"""

from __future__ import annotations

import functools
import re

import numpy as np

# The builtin ASR model's vocabulary: the N most common English words. Small enough for a ~1 M-parameter
# model trained for an hour on two CPU cores to learn every word from many voices; the sample partition is
# written in it (scripts/make_sample_data.py checks).
ASR_VOCABULARY_WORDS = 500
# a language's words: lowercase letters of its alphabet only (no digits, apostrophes or foreign script)
# (Japanese: kana only, which espeak-ng reads as Japanese; it reads kanji as English)
LETTERS = {"en": re.compile(r"^[a-z]+$"), "es": re.compile(r"^[a-záéíóúüñ]+$"), "de": re.compile(r"^[a-zäöüß]+$"),
           "ja": re.compile(r"^[\u3041-\u309f\u30a0-\u30ff]+$")}


@functools.lru_cache(maxsize=8)
def common_words(n: int = 3000, language: str = "en") -> tuple[str, ...]:
    from wordfreq import top_n_list

    words = [w for w in top_n_list(language, n * 2) if LETTERS[language].match(w)]
    return tuple(words[:n])


def outside_vocabulary(sentences, n: int = ASR_VOCABULARY_WORDS, language: str = "en") -> set[str]:
    """The words of `sentences` that are not among the language's N most common words (its builtin ASR model's
    vocabulary)."""
    return {word for sentence in sentences for word in sentence.split()} - set(common_words(n, language))


def make_sentences(count: int, rng: np.random.Generator, vocabulary: int = 3000, lengths=(3, 12),
                   language: str = "en") -> list[str]:
    words = common_words(vocabulary, language)
    ranks = np.arange(1, len(words) + 1)
    weights = 1.0 / ranks**0.6  # flatter than Zipf: rare words still come up
    weights /= weights.sum()
    sentences, seen = [], set()
    while len(sentences) < count:
        n = int(rng.integers(lengths[0], lengths[1] + 1))
        sentence = " ".join(words[i] for i in rng.choice(len(words), size=n, p=weights))
        if sentence not in seen:
            seen.add(sentence)
            sentences.append(sentence)
    return sentences


# Japanese morae in hiragana: the basic syllables, their voiced forms, and the contracted ones (きゃ, しゅ, ...)
HIRAGANA_MORAE = tuple(
    "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわ"
    "がぎぐげござじずぜぞだでどばびぶべぼぱぴぷぺぽ") + tuple(
    c + y for c in "きしちにひみりぎじびぴ" for y in "ゃゅょ")
GEMINATES = "かきくけこさしすせそたちつてとぱぴぷぺぽ"  # a mora っ may come before (a doubled consonant)


def pseudo_word(rng: np.random.Generator) -> str:
    """2-4 hiragana morae, now and then an ん after one or a っ before a mora that can double."""
    morae = [HIRAGANA_MORAE[i] for i in rng.integers(len(HIRAGANA_MORAE), size=int(rng.integers(2, 5)))]
    word = morae[0]
    for mora in morae[1:]:
        extra = rng.random()
        word += ("ん" if extra < 0.12 else "っ" if extra < 0.2 and mora[0] in GEMINATES else "") + mora
    return word


def mix_pseudo_words(sentences: list[str], share: float, rng: np.random.Generator) -> list[str]:
    """Each word of `sentences` replaced by a made-up hiragana word (`pseudo_word`) with probability `share`."""
    return [" ".join(pseudo_word(rng) if rng.random() < share else word for word in sentence.split())
            for sentence in sentences]
