"""Flight planning: budget, unit cap, long units alone, deterministic."""

from __future__ import annotations

import random

import pytest

from batch_assets.ingest.flights import plan_flights


def _flights(plan):
    out: dict[str, list] = {}
    for p in plan:
        out.setdefault(p.flight_id, []).append(p)
    return out


def test_packs_within_budget_and_unit_cap():
    rng = random.Random(7)
    units = [(f"u{i:03d}", rng.uniform(5, 700)) for i in range(200)]
    plan = plan_flights(units, budget_s=1800, max_units=8)
    assert [p.unit_id for p in plan] == [u for u, _ in units]  # every unit once, in manifest order
    for members in _flights(plan).values():
        assert len(members) <= 8
        assert sum(m.duration_s for m in members) <= 1800 or len(members) == 1
        assert [m.position for m in members] == list(range(len(members)))
    assert plan == plan_flights(units, budget_s=1800, max_units=8)


def test_a_unit_longer_than_the_budget_flies_alone():
    plan = plan_flights([("a", 100.0), ("long", 4000.0), ("b", 50.0)], budget_s=1800, max_units=8)
    flights = _flights(plan)
    assert [[m.unit_id for m in f] for f in flights.values()] == [["a"], ["long"], ["b"]]


def test_unit_cap_closes_a_flight():
    plan = plan_flights([(f"u{i}", 1.0) for i in range(10)], budget_s=1800, max_units=4)
    assert [len(f) for f in _flights(plan).values()] == [4, 4, 2]


def test_invalid_settings_are_refused():
    with pytest.raises(ValueError):
        plan_flights([("a", 1.0)], budget_s=0)
    with pytest.raises(ValueError):
        plan_flights([("a", 1.0)], max_units=0)
