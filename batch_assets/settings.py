"""One strict parser for every setting read from an environment variable, and the resources' env sources.

Every variable the code reads goes through a parser here: integers, fractions, booleans, days, choices and
strings. A value that does not parse, or lies outside the accepted range, raises an error that names the
variable, what it held and what it accepts: a typo in a deployment must never silently mean something else
(`0` runs per backfill, `yes` for a schedule that then stays off). The code location's settings are read once,
when it loads (module constants and `definitions.build_resources`); two are read when a model loads, in the
step that loads it: `BATCH_ASSETS_MODEL_CACHE` and `HF_TOKEN`. String settings of resources (URLs, model
names, the device) become `dg.EnvVar`s when set (`env_or`), so the UI shows where a value came from and
each run resolves it from its own environment; `batch_assets/definitions.py` builds every resource from
them, in one place.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from typing import TypeVar

import dagster as dg

T = TypeVar("T")


class SettingError(ValueError):
    """An environment variable holds a value its setting does not accept."""


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(name)
    return None if value is None or value.strip() == "" else value.strip()


def _number(name: str, default, parse, kind: str, minimum, maximum, accepts: str, environ: Mapping[str, str] | None):
    raw = _raw(name, environ)
    if raw is None:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not {kind}: use {accepts}") from None
    if not minimum <= value <= maximum:
        raise SettingError(f"{name}={value} is out of range: use {accepts}")
    return value


def env_int(name: str, default: int, minimum: int, maximum: int, environ: Mapping[str, str] | None = None) -> int:
    """An integer in [minimum, maximum]; unset or empty means `default`."""
    return _number(name, default, int, "an integer", minimum, maximum, f"a whole number from {minimum} to {maximum}", environ)


def env_fraction(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    """A number in [0, 1]; unset or empty means `default`."""
    return _number(name, default, float, "a number", 0.0, 1.0, "a fraction from 0 to 1 (e.g. 0.5)", environ)


def env_bool(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """'true' or 'false' (any case, surrounding spaces ignored); unset or empty means `default`."""
    raw = _raw(name, environ)
    if raw is None:
        return default
    value = raw.lower()
    if value in ("true", "false"):
        return value == "true"
    raise SettingError(f"{name}={raw!r} is not a valid boolean: use 'true' or 'false'")


def env_day(name: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    """A day, YYYY-MM-DD; unset or empty means `default`."""
    raw = _raw(name, environ) or default
    try:
        datetime.datetime.strptime(raw, "%Y-%m-%d")
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not a day: use YYYY-MM-DD (e.g. {default})") from None
    return raw


def env_choice(name: str, default: str, choices: tuple[str, ...], environ: Mapping[str, str] | None = None) -> str:
    """One of `choices` (any case); unset or empty means `default`."""
    raw = _raw(name, environ)
    if raw is None:
        return default
    if raw.lower() not in choices:
        raise SettingError(f"{name}={raw!r} is not one of the choices: use {' or '.join(repr(c) for c in choices)}")
    return raw.lower()


def env_str(name: str, default: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """A string setting (surrounding spaces dropped); unset or empty means `default`."""
    return _raw(name, environ) or default


def env_or(name: str, default: T) -> dg.EnvVar | T:
    """A resource field's source: `dg.EnvVar(name)` when the variable is set, else the default value."""
    return dg.EnvVar(name) if _raw(name, None) is not None else default
