"""Flight planning: pack a partition's decodable units into flights under the decode budget.

A flight is the unit of work the GPU section takes at once, and the unit of decoded audio held in
memory. Packing is greedy in manifest order (deterministic for the same input): a flight closes when
the next unit would take it past the budget (default 1800 audio seconds, each channel's counted for a unit with
several: it may be read channel by channel, `source/channels.py`) or past the unit cap (default 8). A unit longer
than the budget flies alone, and so does every unit named in `alone` (a unit processed in windows:
`prepared_flights` turns its flight into one flight per window, `batch_assets/long_units/windows.py`).
"""

from __future__ import annotations

import dataclasses

DECODE_BUDGET_S = 1800.0
MAX_UNITS_PER_FLIGHT = 8


@dataclasses.dataclass(frozen=True)
class PlannedUnit:
    flight_id: str
    unit_id: str
    position: int  # index of the unit inside its flight
    duration_s: float


def several_channels(manifest) -> dict[str, int]:
    """The units of a manifest (polars) whose objects have several channels, with the count: where the work is
    weighed (flights here, shards and the prepare-ahead budget: `gpu/steps/resume.py`), each channel's seconds count
    (a manifest written before the column: none)."""
    if "channels" not in manifest.columns:
        return {}
    return {uid: int(n) for uid, n in zip(manifest["unit_id"], manifest["channels"], strict=True) if n and n > 1}


def plan_flights(
    units: list[tuple[str, float]],
    budget_s: float = DECODE_BUDGET_S,
    max_units: int = MAX_UNITS_PER_FLIGHT,
    alone: frozenset[str] = frozenset(),
    channels: dict[str, int] | None = None,
) -> list[PlannedUnit]:
    """`units` is [(unit_id, duration_s)] in manifest order; returns the plan in flight order. `channels`: a unit's
    channels where it has several: the budget counts each channel's seconds (it may be read channel by channel)."""
    channels = channels or {}
    if budget_s <= 0 or max_units < 1:
        raise ValueError("budget_s must be positive and max_units at least 1")
    plan: list[PlannedUnit] = []
    flight: list[tuple[str, float]] = []
    flight_s = 0.0
    number = 0

    def close() -> None:
        nonlocal flight, flight_s, number
        if flight:
            flight_id = f"flight-{number:04d}"
            plan.extend(PlannedUnit(flight_id, uid, i, d) for i, (uid, d) in enumerate(flight))
            number += 1
        flight, flight_s = [], 0.0

    for unit_id, duration_s in units:
        counted = duration_s * channels.get(unit_id, 1)
        if flight and (flight_s + counted > budget_s or len(flight) >= max_units or unit_id in alone
                       or flight[-1][0] in alone):
            close()
        flight.append((unit_id, duration_s))
        flight_s += counted
    close()
    return plan
