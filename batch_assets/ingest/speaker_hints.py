"""How many speakers to look for: pyannote's `num_speakers`, `min_speakers`, `max_speakers`, per unit.

Two sources, the unit's own winning: the run config of a partition (`gpu_section`'s `num_speakers`,
`min_speakers`, `max_speakers`; `batch-assets run --num-speakers ...`) for all its units, and a JSON sidecar
beside an audio object, named after it with `.json` appended (`call.flac` -> `call.flac.json`:
`{"num_speakers": 2}` or `{"min_speakers": 2, "max_speakers": 4}`). A sidecar is not a unit (it is listed in
`skipped` as one); bad hints never fail anything: the unit runs without hints and its `reason` says why.
The hints applied are recorded per unit in `transcripts/units` (`hint_*` columns). A sidecar may also declare
the unit's language (`{"language": "es"}`: `sidecar_language`, read on its own; `ingest/unit_language.py`) and how
its channels are read (`ingest/unit_channels.py`).
"""

from __future__ import annotations

import dataclasses
import json

from batch_assets.ingest.unit_channels import CHANNEL_KEYS

SIDECAR_SUFFIX = ".json"
MAX_SIDECAR_BYTES = 4096
KEYS = ("num_speakers", "min_speakers", "max_speakers")
LANGUAGE_KEY = "language"  # the unit's language, beside the hints (`ingest/unit_language.py`)
SIDECAR, RUN_CONFIG = "sidecar", "run config"


class HintError(ValueError):
    """Hints that cannot be used; the message says which value and why."""


@dataclasses.dataclass(frozen=True)
class SpeakerHints:
    num_speakers: int | None = None
    min_speakers: int | None = None
    max_speakers: int | None = None

    def __post_init__(self) -> None:
        for key in KEYS:
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise HintError(f"{key} must be a positive integer, not {value!r}")
        if self.min_speakers is not None and self.max_speakers is not None and self.min_speakers > self.max_speakers:
            raise HintError(f"min_speakers {self.min_speakers} is more than max_speakers {self.max_speakers}")
        if self.num_speakers is not None and (self.min_speakers is not None or self.max_speakers is not None):
            raise HintError("give num_speakers, or min_speakers/max_speakers, not both")

    def __bool__(self) -> bool:
        return any(getattr(self, key) is not None for key in KEYS)

    def pipeline_kwargs(self) -> dict[str, int]:
        """What pyannote's pipeline call takes (only the hints given)."""
        return {key: getattr(self, key) for key in KEYS if getattr(self, key) is not None}

    @property
    def most(self) -> int | None:
        """The unit's most speakers (`num_speakers`, else `max_speakers`; None: no bound)."""
        return self.num_speakers or self.max_speakers

    @property
    def least(self) -> int:
        """The unit's fewest speakers (`num_speakers`, else `min_speakers`, else 1)."""
        return self.num_speakers or self.min_speakers or 1

    def less(self, parties: int, shared: bool = False) -> SpeakerHints:
        """The hints for one channel of a unit read by channel, its other channels holding `parties` one-party
        speakers (`gpu/section/channels.py`): each count less them (at least 1); `shared`: another channel is
        diarized too, so the rest cannot be split between them: no hints."""
        if shared or not self:
            return NO_HINTS
        less = lambda n: None if n is None else max(1, n - parties)  # noqa: E731
        return SpeakerHints(less(self.num_speakers), less(self.min_speakers), less(self.max_speakers))

    def describe(self) -> str:
        return ", ".join(f"{key}={value}" for key, value in self.pipeline_kwargs().items()) or "none"


NO_HINTS = SpeakerHints()


def sidecar_object(data: bytes, name: str) -> dict:
    if len(data) > MAX_SIDECAR_BYTES:
        raise HintError(f"{name}: {len(data)} bytes, more than a sidecar's {MAX_SIDECAR_BYTES}")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HintError(f"{name}: not JSON ({error})") from None
    if not isinstance(value, dict):
        raise HintError(f"{name}: a JSON object is expected, like {{\"num_speakers\": 2}}, not {type(value).__name__}")
    return value


def parse_sidecar(data: bytes, name: str) -> SpeakerHints:
    """A sidecar's hints; HintError naming the sidecar and what is wrong with it."""
    value = sidecar_object(data, name)
    unknown = sorted(set(value) - set(KEYS) - {LANGUAGE_KEY} - set(CHANNEL_KEYS))
    if unknown:
        raise HintError(f"{name}: unknown key(s) {', '.join(map(repr, unknown))}: the keys are "
                        f"{', '.join((*KEYS, LANGUAGE_KEY, *CHANNEL_KEYS))}")
    try:
        return SpeakerHints(**{key: value[key] for key in KEYS if key in value})
    except HintError as error:
        raise HintError(f"{name}: {error}") from None


def sidecar_language(data: bytes, name: str) -> str | None:
    """The sidecar's `language` as written (a string; any other JSON value as its JSON text), or None: absent, or
    the sidecar unreadable (then `parse_sidecar` says why). Checked when the unit's language is resolved, so a bad
    code fails that unit with a reason (`ingest/unit_language.py`)."""
    try:
        value = sidecar_object(data, name).get(LANGUAGE_KEY)
    except HintError:
        return None
    return value if value is None or isinstance(value, str) else json.dumps(value)


def sidecar_of(key: str) -> str:
    return key + SIDECAR_SUFFIX


@dataclasses.dataclass(frozen=True)
class AppliedHints:
    """The hints a unit's diarization is given and where they came from (`SIDECAR`, `RUN_CONFIG`, or None)."""

    hints: SpeakerHints
    source: str | None


UNHINTED = AppliedHints(NO_HINTS, None)


def unit_hints(run: SpeakerHints, manifest_row: dict) -> AppliedHints:
    """The hints to apply to one unit: its sidecar's (the manifest row's `hint_*`, validated when `fetched_audio`
    read them) if it has any, else the run's."""
    sidecar = SpeakerHints(**{key: manifest_row.get(f"hint_{key}") for key in KEYS})
    if sidecar:
        return AppliedHints(sidecar, SIDECAR)
    return AppliedHints(run, RUN_CONFIG) if run else UNHINTED
