"""Languages: the codes a unit's language may take, and which ASR model hears each (the routing).

A leaf module (no model library): the settings, the run config and the CLI validate codes with it when the code
location loads. A language is an ISO 639-1 code (`en`, `es`, `ja`). The routing (`asr_models`) maps a language to
one ASR model; a unit whose language has no entry is published as `unsupported_language`, never transcribed by
another language's model. It is written `lang=model,lang=model`, optionally after a preset:

- `builtin`: the offline tiny TDTs trained here, English, Spanish, German and Japanese (`docs/models.md`);
- `production`: `en` -> `nvidia/parakeet-tdt-0.6b-v2`, the 24 other languages of `nvidia/parakeet-tdt-0.6b-v3`
  -> v3, `ja` -> `nvidia/parakeet-tdt_ctc-0.6b-ja`;
- `production,ja=/models/ja.nemo`: a preset with entries replaced or added.
"""

from __future__ import annotations

import types
from collections.abc import Mapping

# ISO 639-1: every two-letter language code
ISO_639_1 = frozenset("""
aa ab ae af ak am an ar as av ay az ba be bg bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el en eo
es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it iu ja jv ka
kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt my na nb nd ne ng
nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl sm sn so sq sr ss st su
sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo za zh zu""".split())

# written without spaces between words: a transcript's words are joined with nothing between them
UNSPACED = frozenset({"ja", "zh", "th", "lo", "km", "my"})

PARAKEET_V2 = "nvidia/parakeet-tdt-0.6b-v2"
PARAKEET_V3 = "nvidia/parakeet-tdt-0.6b-v3"
PARAKEET_JA = "nvidia/parakeet-tdt_ctc-0.6b-ja"
# the 25 European languages of parakeet-tdt-0.6b-v3 (its model card)
PARAKEET_V3_LANGUAGES = ("bg", "cs", "da", "de", "el", "en", "es", "et", "fi", "fr", "hr", "hu", "it", "lt", "lv",
                         "mt", "nl", "pl", "pt", "ro", "ru", "sk", "sl", "sv", "uk")

TINY_TDT_ES = "builtin:tiny-tdt-es"
TINY_TDT_DE = "builtin:tiny-tdt-de"
TINY_TDT_JA = "builtin:tiny-tdt-ja"
TINY_LANGID = "builtin:tiny-langid"
AMBERNET = "langid_ambernet"  # NeMo's language identification model (VoxLingua107), by name

PRESETS: Mapping[str, Mapping[str, str]] = types.MappingProxyType({
    "builtin": types.MappingProxyType({"en": "builtin:tiny-tdt", "es": TINY_TDT_ES, "de": TINY_TDT_DE,
                                       "ja": TINY_TDT_JA}),
    "production": types.MappingProxyType(
        {lang: PARAKEET_V3 for lang in PARAKEET_V3_LANGUAGES} | {"en": PARAKEET_V2, "ja": PARAKEET_JA}),
})
DEFAULT_ROUTING = "builtin"
AUTO = "auto"  # a run's language: detect each unit's


class LanguageError(ValueError):
    """A language code or a routing that cannot be used; the message names the value and what is accepted."""


def check_code(code: object, where: str) -> str:
    """`code` as a language (lowercase ISO 639-1); LanguageError naming `where` it came from otherwise."""
    if not isinstance(code, str) or code.strip().lower() not in ISO_639_1:
        raise LanguageError(f"{where}: {code!r} is not an ISO 639-1 language code (two letters, like 'en', 'es', "
                            "'ja')")
    return code.strip().lower()


def parse_routing(spec: str, where: str = "asr_models") -> dict[str, str]:
    """`builtin`, `production`, `lang=model,...` or a preset followed by entries -> {language: model}."""
    routing: dict[str, str] = {}
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise LanguageError(f"{where} is empty: use a preset ({', '.join(PRESETS)}) or entries like en=MODEL,es=MODEL")
    for i, part in enumerate(parts):
        if "=" not in part:
            if i != 0 or part not in PRESETS:
                raise LanguageError(f"{where}: {part!r} is neither a preset ({', '.join(PRESETS)}; first only) nor an "
                                    "entry like es=MODEL")
            routing.update(PRESETS[part])
            continue
        lang, model = (s.strip() for s in part.split("=", 1))
        lang = check_code(lang, where)
        if not model:
            raise LanguageError(f"{where}: {lang!r} has no model after '='")
        routing[lang] = model
    return routing


def with_english(routing: Mapping[str, str], english: str | None) -> dict[str, str]:
    """`routing` with its `en` entry replaced by `english` (`BATCH_ASSETS_ASR_MODEL`, `--asr-model`) when given."""
    return dict(routing) | ({"en": english} if english else {})


def describe_routing(routing: Mapping[str, str]) -> str:
    return ", ".join(sorted(routing)) or "none"


def run_language(value: str | None, routing: Mapping[str, str], where: str) -> str | None:
    """A run's language (config or CLI): None for `auto` (detect each unit's), else a code the routing hears;
    LanguageError naming the code and the configured languages otherwise (refused before any work)."""
    if value is None or value.strip().lower() == AUTO:
        return None
    code = check_code(value, where)
    if code not in routing:
        raise LanguageError(f"{where}: no ASR model for language {code!r}; configured: {describe_routing(routing)} "
                            "(BATCH_ASSETS_ASR_MODELS), or 'auto' to detect each unit's")
    return code


def word_separator(language: str | None) -> str:
    """What goes between two words of a transcript in `language`."""
    return "" if language in UNSPACED else " "


def written(text: str, language: str | None) -> str:
    """A sentence of words as `language` writes it: run together where it is written without spaces."""
    return word_separator(language).join(text.split())
