"""Grammatical training sentences over the ASR model's vocabulary: a small phrase grammar.

Random word draws (`models/sentences.py: make_sentences`) teach the acoustics of every word but no context, so the
model cannot tell "two" from "too", "there" from "their" or "know" from "no" in real dialogue: the
prediction network never sees which word follows which. This grammar writes everyday sentences
(statements, questions, requests, answers, joined clauses) so those contexts exist in training.

Only the grammar's closed classes (pronouns, determiners, prepositions, modals, conjunctions) are
written here; each is filtered to the vocabulary. Open-class words (nouns, verbs and their
inflections, adjectives) come from the vocabulary itself, tagged by lemminflect's lexicon, so the
words stay wordfreq's, not a hand-typed list.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

SUBJECTS = {  # pronoun -> does it take the third-person verb form
    "i": False, "you": False, "we": False, "they": False, "people": False,
    "he": True, "she": True, "it": True, "someone": True, "everyone": True,
}
OBJECT_PRONOUNS = ["me", "you", "him", "her", "us", "them", "it", "this", "that", "something", "everything",
                   "anything", "nothing", "someone", "everyone"]
SINGULAR_DETERMINERS = ["the", "a", "this", "that", "my", "your", "our", "their", "his", "her", "each", "every",
                        "another", "any", "some", "no", "one"]
PLURAL_DETERMINERS = ["the", "these", "those", "my", "your", "our", "their", "his", "her", "some", "many", "all",
                      "both", "few", "more", "no", "two", "three", "four", "five", "six", "several", "other"]
NUMBERS = ["one", "two", "three", "four", "five", "six", "second", "third", "million"]
MODALS = ["can", "will", "would", "could", "should", "may", "might", "must"]
PREPOSITIONS = ["in", "on", "at", "for", "with", "from", "to", "about", "into", "over", "after", "before", "under",
                "through", "without", "near", "behind", "between", "around", "by", "of", "during", "against"]
CONJUNCTIONS = ["and", "but", "so", "because", "if", "when", "or", "while", "although", "though", "after",
                "before", "until", "since"]
WH_WORDS = ["what", "who", "where", "when", "why", "how", "which"]
OPENERS = ["yes", "no", "oh", "well", "so", "yeah", "thanks", "please", "great", "thank you", "good morning",
           "sure", "maybe", "actually", "right", "ok"]
PRE_VERB_ADVERBS = ["really", "just", "also", "always", "never", "often", "still", "actually", "probably", "even",
                    "only", "already"]
INTENSIFIERS = ["very", "too", "so", "really", "pretty", "quite", "much", "a little", "a bit"]
ENDINGS = ["today", "now", "again", "too", "here", "there", "later", "soon", "already", "yet", "right now",
           "last night", "next week", "this morning", "every day", "last year", "next year", "this week",
           "last week", "at home", "over there", "so much", "a lot", "all day", "for a while", "at work",
           "in the morning", "at night", "for now", "as well", "at all", "on time", "two days ago",
           "as soon as possible"]
ANSWERS = ["no problem", "me too", "you too", "of course", "not yet", "not really", "i know", "i think so",
           "i do not know", "thank you so much", "see you", "good to know", "that is right", "me neither",
           "sounds good", "all right", "not at all", "good idea", "i hope so", "you know"]
_NOT_OPEN = set(SUBJECTS) | set(OBJECT_PRONOUNS) | set(SINGULAR_DETERMINERS) | set(PLURAL_DETERMINERS) | set(
    MODALS) | set(PREPOSITIONS) | set(CONJUNCTIONS) | set(WH_WORDS) | set(PRE_VERB_ADVERBS) | set(NUMBERS) | {
    "be", "is", "are", "was", "were", "am", "been", "being", "have", "has", "had", "having", "do", "does", "did",
    "doing", "done", "not", "there", "here", "then", "than", "yes", "no", "oh", "yeah", "as", "up", "out", "off",
    "down", "back", "away", "so", "too", "very", "well", "also", "just", "like", "more", "most", "much", "less",
    "least", "gonna", "mr", "non", "per", "shit", "fuck", "fucking", "else", "however", "whether", "either", "due",
    "including", "according", "following", "further", "ago", "within", "among", "along", "s", "d", "t", "m", "b",
    "r", "c", "e", "john", "york", "god", "need", "needs", "must", "may", "might", "own", "same", "such", "while",
}


@dataclasses.dataclass(frozen=True)
class Lexicon:
    """The vocabulary's open-class words by part of speech, and the vocabulary itself."""

    nouns: tuple[str, ...]
    plurals: tuple[str, ...]
    adjectives: tuple[str, ...]
    verbs: tuple[str, ...]  # base forms
    past: dict  # base -> past tense, where the vocabulary has it
    third: dict  # base -> third person singular
    ing: dict  # base -> present participle
    vocabulary: frozenset


def _usage(word: str) -> float:
    from wordfreq import zipf_frequency

    return zipf_frequency(word, "en")


@functools.lru_cache(maxsize=4)
def lexicon(vocabulary: tuple[str, ...]) -> Lexicon:
    """Tag the vocabulary's open-class words. lemminflect lists every part of speech a word *can* have
    ("white" is a verb, "room" a verb); a tag counts only where the word's inflections are in common use
    (wordfreq): a verb needs frequent -ing/-ed forms, a noun a frequent plural (or no other tag)."""
    from lemminflect import getAllInflections, getAllLemmas

    vocab = frozenset(vocabulary)
    nouns, plural_of, adjectives, verbs, past, third, ing = [], {}, [], [], {}, {}, {}
    for word in vocabulary:
        if word in _NOT_OPEN or len(word) < 2:
            continue
        lemmas, usage = getAllLemmas(word), _usage(word)
        verb_forms = getAllInflections(word, upos="VERB") if lemmas.get("VERB") == (word,) else {}
        # -s forms are left out: "states" and "games" are plural nouns far more often than verbs
        verb_usage = max((_usage(f) for tag in ("VBD", "VBG") for f in verb_forms.get(tag, ())), default=-9.0)
        is_verb = verb_usage >= usage - 1.5
        plural_forms = getAllInflections(word, upos="NOUN").get("NNS", ()) if lemmas.get("NOUN") == (word,) else ()
        plural_usage = max((_usage(f) for f in plural_forms), default=-9.0)
        if plural_forms and (plural_usage >= usage - 2.0 or set(lemmas) == {"NOUN"}):
            nouns.append(word)
        if "NOUN" in lemmas and lemmas["NOUN"][0] != word:
            plural_of[word] = lemmas["NOUN"][0]
        is_verb_form = lemmas.get("VERB", (word,))[0] != word  # "used", "going", "wanted"
        if lemmas.get("ADJ") == (word,) and not is_verb and not is_verb_form and plural_usage < usage - 1.2:
            adjectives.append(word)
        if is_verb:
            verbs.append(word)
            for table, tag in ((past, "VBD"), (third, "VBZ"), (ing, "VBG")):
                inflected = [f for f in verb_forms.get(tag, ()) if f in vocab]
                if inflected:
                    table[word] = inflected[0]
    plurals = [word for word, singular in plural_of.items() if singular in nouns]
    return Lexicon(tuple(nouns), tuple(plurals), tuple(adjectives), tuple(verbs), past, third, ing, vocab)


class _Writer:
    """One sentence at a time from a seeded generator; every phrase keeps to the vocabulary."""

    def __init__(self, lex: Lexicon, rng: np.random.Generator):
        self.lex, self.rng = lex, rng
        self.subjects = self.in_vocab(SUBJECTS)
        self.objects, self.modals = self.in_vocab(OBJECT_PRONOUNS), self.in_vocab(MODALS)
        self.det_sg, self.det_pl = self.in_vocab(SINGULAR_DETERMINERS), self.in_vocab(PLURAL_DETERMINERS)
        self.preps, self.conjs, self.wh = (self.in_vocab(PREPOSITIONS), self.in_vocab(CONJUNCTIONS),
                                           self.in_vocab(WH_WORDS))
        self.openers, self.pre_adverbs = self.in_vocab(OPENERS), self.in_vocab(PRE_VERB_ADVERBS)
        self.intensifiers, self.endings, self.answers = (self.in_vocab(INTENSIFIERS), self.in_vocab(ENDINGS),
                                                         self.in_vocab(ANSWERS))

    def in_vocab(self, items) -> list[str]:
        return [w for w in items if self.lex.vocabulary.issuperset(w.split())]

    def pick(self, items):
        return items[int(self.rng.integers(len(items)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def noun_phrase(self) -> str:
        adjective = self.pick(self.lex.adjectives) + " " if self.chance(0.3) else ""
        if self.chance(0.3):
            return f"{self.pick(self.det_pl)} {adjective}{self.pick(self.lex.plurals)}"
        return f"{self.pick(self.det_sg)} {adjective}{self.pick(self.lex.nouns)}"

    def obj(self) -> str:
        return self.pick(self.objects) if self.chance(0.35) else self.noun_phrase()

    def subject(self) -> tuple[str, bool]:
        if self.chance(0.65):
            word = self.pick(self.subjects)
            return word, SUBJECTS[word]
        phrase = self.noun_phrase()
        return phrase, phrase.split()[-1] not in self.lex.plurals

    def tail(self) -> str:
        parts = []
        if self.chance(0.6):
            parts.append(self.obj())
        if self.chance(0.35):
            parts.append(f"{self.pick(self.preps)} {self.obj()}")
        if self.chance(0.3):
            parts.append(self.pick(self.endings))
        return " ".join(parts)

    def verb_phrase(self, third_person: bool, subject: str) -> str:
        lex, verb = self.lex, self.pick(self.lex.verbs)
        be = "am" if subject == "i" else ("is" if third_person else "are")
        adverb = self.pick(self.pre_adverbs) + " " if self.chance(0.15) else ""
        choice = int(self.rng.integers(8))
        if choice == 0:
            head = f"{self.pick(self.modals)} {adverb}{verb}"
        elif choice == 1:
            head = f"{'does' if third_person else 'do'} not {verb}" if self.chance(0.5) else f"did not {verb}"
        elif choice == 2 and verb in lex.past:
            head = f"{adverb}{lex.past[verb]}"
        elif choice == 3 and verb in lex.ing:
            head = f"{be} {adverb}{lex.ing[verb]}"
        elif choice == 4:
            want = self.pick(["want", "need", "have", "like", "try", "going"])
            want = {"going": f"{be} going"}.get(want, lex.third.get(want, want + "s") if third_person else want)
            head = f"{want} to {verb}"
        elif choice == 5:
            intensity = self.pick(self.intensifiers) + " " if self.chance(0.5) else ""
            copula = self.pick([be, "was" if third_person or subject == "i" else "were"])
            return f"{copula} {intensity}{self.pick(lex.adjectives)}" + (
                f" {self.pick(self.endings)}" if self.chance(0.3) else "")
        elif third_person and verb in lex.third:
            head = f"{adverb}{lex.third[verb]}"
        elif not third_person:
            head = f"{adverb}{verb}"
        else:
            head = f"will {verb}"
        rest = self.tail()
        return f"{head} {rest}".strip()

    def clause(self) -> str:
        subject, third = self.subject()
        return f"{subject} {self.verb_phrase(third, subject)}"

    def question(self) -> str:
        subject, third = self.subject()
        verb, kind = self.pick(self.lex.verbs), int(self.rng.integers(6))
        if kind == 0:
            return (f"{self.pick(self.wh)} {self.pick(['do', 'did', *self.modals])} {subject} {verb} "
                    f"{self.tail()}").strip()
        if kind == 1:
            return f"{'does' if third else 'do'} {subject} {verb} {self.tail()}".strip()
        if kind == 2:
            return (f"{self.pick(['is there', 'are there', 'was there', 'will there be'])} {self.noun_phrase()} "
                    f"{self.tail()}").strip()
        if kind == 3:
            return (f"how many {self.pick(self.lex.plurals)} {self.pick(['do', 'did', *self.modals])} "
                    f"{subject} {verb}").strip()
        if kind == 4:
            return f"{self.pick(self.modals)} {subject} {verb} {self.tail()}".strip()
        return f"{self.pick(['is', 'was'])} {self.noun_phrase()} {self.pick(self.lex.adjectives)}"

    def request(self) -> str:
        verb = self.pick(self.lex.verbs)
        start = self.pick(["please", "let us", "can you", "could you", "do not", "remember to", ""])
        return f"{start} {verb} {self.tail()}".strip()

    def there(self) -> str:
        be = self.pick(["is", "was", "will be", "are", "were"])
        if be in ("is", "was", "will be"):
            adjective = self.pick(self.lex.adjectives) + " " if self.chance(0.3) else ""
            thing = f"{self.pick(self.det_sg)} {adjective}{self.pick(self.lex.nouns)}"
        else:
            thing = f"{self.pick(self.det_pl)} {self.pick(self.lex.plurals)}"
        return f"there {be} {thing} {self.tail()}".strip()

    def sentence(self) -> str:
        kind = float(self.rng.random())
        if kind < 0.4:
            body = self.clause()
        elif kind < 0.55:
            body = self.question()
        elif kind < 0.65:
            body = self.request()
        elif kind < 0.73:
            body = self.there()
        elif kind < 0.83:
            return f"{self.pick(self.answers)} {self.clause()}" if self.chance(0.7) else self.pick(self.answers)
        else:
            body = f"{self.clause()} {self.pick(self.conjs)} {self.clause()}"
        if self.chance(0.2):
            body = f"{self.pick(self.openers)} {body}"
        if self.chance(0.12):
            body = f"{self.pick(['i think', 'i know', 'i hope', 'you know', 'i mean', 'i guess'])} {body}"
        return body


def make_grammar_sentences(count: int, rng: np.random.Generator, vocabulary: int, lengths=(2, 16)) -> list[str]:
    """`count` distinct sentences (2 to 16 words) from the grammar, over the N most common words."""
    from batch_assets.models.sentences import common_words

    lex = lexicon(common_words(vocabulary))
    writer = _Writer(lex, rng)
    sentences, seen = [], set()
    while len(sentences) < count:
        words = writer.sentence().split()
        sentence = " ".join(words)
        if lengths[0] <= len(words) <= lengths[1] and sentence not in seen and lex.vocabulary.issuperset(words):
            seen.add(sentence)
            sentences.append(sentence)
    return sentences
