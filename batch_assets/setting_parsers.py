"""How one environment variable is parsed, strictly: each parser names the variable, what it held and what it accepts.

Why apart from `settings.py`: the parsers are the grammar of every setting (numbers in a range, booleans that are
`true` or `false` and nothing else, days, clock times, choices, routings, folders); `Settings` declares which
variable each field reads with which parser. No Dagster.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import types
from collections.abc import Callable, Mapping
from typing import Any

from batch_assets.models.languages import LanguageError, parse_routing


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
    return _number(name, default, int, "an integer", minimum, maximum, f"a whole number from {minimum} to {maximum}",
                   environ)


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


def env_routing(name: str, default: str, environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """Language -> ASR model (`models/languages.py: parse_routing`); unset or empty means the `default` preset."""
    raw = _raw(name, environ) or default
    try:
        return types.MappingProxyType(parse_routing(raw, name))
    except LanguageError as error:
        raise SettingError(str(error)) from None


def env_path(name: str, default: pathlib.Path, environ: Mapping[str, str] | None = None) -> pathlib.Path:
    """A folder (`~` expanded); unset or empty means `default`."""
    raw = _raw(name, environ)
    return default if raw is None else pathlib.Path(raw).expanduser()


def read_each(readers: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """Each reader's value by name; one `SettingError` naming every variable that does not parse, one line each
    (not only the first)."""
    values, errors = {}, []
    for name, read in readers.items():
        try:
            values[name] = read()
        except SettingError as error:
            errors.append(str(error))
    if errors:
        raise SettingError("\n".join(errors))
    return values


def env_clock(name: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    """A time of day, HH:MM (24 h, UTC); unset or empty means `default`."""
    raw = _raw(name, environ) or default
    try:
        return datetime.datetime.strptime(raw, "%H:%M").strftime("%H:%M")
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not a time of day: use HH:MM, 24-hour, UTC (e.g. {default})") from None
