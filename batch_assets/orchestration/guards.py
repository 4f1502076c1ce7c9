"""The guards that keep a run from publishing less than the partition already has. No Dagster.

Two faults look like bad audio unit by unit but are not: storage that lists objects and will not serve
them (a cold storage class, a revoked key or KMS grant), and a device or model that fails every unit. A
run that classes every unit `fetch_failed` or `failed` for such a reason would replace a good day with
nothing. So, before anything is written:

- the degrade guard (`degrade_problem`) compares the new classes with the partition's current
  `transcripts` units: when more than `fraction` of the units now transcribed (`transcribed` or
  `truncated`: they have words) would become unread, undecoded or unprocessed (`DEGRADED_CLASSES`:
  `fetch_failed`, `failed`, `changed_since_listed`, `undecodable`, and `unsupported_language`: a language
  taken out of the routing), it names the counts and the commonest reasons, and the caller refuses the
  write unless told `allow_degrade`;
- on a day with no results yet, `systemic_problem` refuses a run whose every unit (at least two) is
  `fetch_failed` or `failed` for one and the same reason: that reason is a configuration or system
  fault, not the audio.

Units are matched by `source_uri` (the object), not by unit_id, so a change of the id scheme between
runs cannot hide a degradation.
"""

from __future__ import annotations

import collections
import dataclasses

import polars as pl

from batch_assets.schema.results import ResultClass

# what a unit with words becomes when storage, decoder or device fail it (the same bytes decoded before)
DEGRADED_CLASSES = (str(ResultClass.FETCH_FAILED), str(ResultClass.FAILED), str(ResultClass.CHANGED_SINCE_LISTED),
                    str(ResultClass.UNDECODABLE), str(ResultClass.UNSUPPORTED_LANGUAGE))
# what every unit of a first-time day failing for one reason says about the system (corrupt files say nothing)
SYSTEMIC_CLASSES = (str(ResultClass.FETCH_FAILED), str(ResultClass.FAILED))
WITH_WORDS = (str(ResultClass.TRANSCRIBED), str(ResultClass.TRUNCATED))
SYSTEMIC_MIN_UNITS = 2  # one unit failing is that unit's problem, whatever the reason


def general_reason(row: dict) -> str:
    """A unit's reason with its own object named generically, so that one fault reads the same for every unit."""
    reason = row.get("reason") or ""
    uri = row.get("source_uri") or ""
    for name in (uri, uri.split("://", 1)[-1], row.get("relative_key") or ""):
        if name:
            reason = reason.replace(name, "<object>")
    return reason


def _commonest(rows: list[dict], top: int = 3) -> list[tuple[str, int]]:
    return collections.Counter(general_reason(r) for r in rows).most_common(top)


@dataclasses.dataclass(frozen=True)
class Degradation:
    """Units with words now, that the new results would leave without (by class), and why."""

    with_words: int
    degraded: int
    by_class: dict[str, int]
    reasons: list[tuple[str, int]]

    def describe(self) -> str:
        classes = ", ".join(f"{n} {c}" for c, n in self.by_class.items())
        reasons = "; ".join(f"{n}x {r[:300]!r}" for r, n in self.reasons)
        return (f"{self.degraded} of the {self.with_words} units that have transcripts now would become {classes} "
                f"(commonest reasons: {reasons})")


def degrade_problem(previous: pl.DataFrame | None, new: pl.DataFrame, fraction: float) -> Degradation | None:
    """The degradation `new` (rows with source_uri, result_class, reason) would publish over `previous` (the
    partition's current transcripts units, None when it has none), when it is over `fraction` of the units
    with words now; None otherwise."""
    if previous is None or previous.is_empty():
        return None
    had_words = set(previous.filter(pl.col("result_class").is_in(WITH_WORDS))["source_uri"].to_list())
    if not had_words:
        return None
    lost = [r for r in new.iter_rows(named=True)
            if r["source_uri"] in had_words and r["result_class"] in DEGRADED_CLASSES]
    if not lost or len(lost) <= fraction * len(had_words):
        return None
    by_class = dict(sorted(collections.Counter(r["result_class"] for r in lost).items()))
    return Degradation(len(had_words), len(lost), by_class, _commonest(lost))


def systemic_problem(new: pl.DataFrame) -> str | None:
    """On a first-time day: the one reason every unit (at least `SYSTEMIC_MIN_UNITS`) failed for, or None."""
    rows = list(new.iter_rows(named=True))
    if len(rows) < SYSTEMIC_MIN_UNITS or any(r["result_class"] not in SYSTEMIC_CLASSES for r in rows):
        return None
    reasons = _commonest(rows, top=2)
    if len(reasons) != 1:
        return None
    classes = " or ".join(sorted({r["result_class"] for r in rows}))
    return f"all {len(rows)} units are {classes} for one reason: {reasons[0][0][:500]!r}"


def with_source_uris(plan: pl.DataFrame, manifest: pl.DataFrame) -> pl.DataFrame:
    """The plan's units, one row each (a windowed unit's windows share its class), with each unit's source_uri
    (the plan names units by unit_id only)."""
    units = plan.unique("unit_id", keep="first", maintain_order=True)
    return units.join(manifest.select("unit_id", "source_uri", "relative_key"), on="unit_id", how="left")
