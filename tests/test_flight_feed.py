"""Lever 1's feed: never more than the budget prepared ahead, everything released at the end."""

from __future__ import annotations

import threading
import time

import numpy as np

from batch_assets.gpu.section.flight_feed import FlightFeed


class Recorder:
    def __init__(self, seconds: dict[str, float], delay: float = 0.01):
        self.seconds = seconds
        self.delay = delay
        self.live: set[str] = set()  # loaded and not yet consumed
        self.max_live_s = 0.0
        self.loaded: list[str] = []
        self.lock = threading.Lock()

    def load(self, flight_id: str) -> np.ndarray:
        time.sleep(self.delay)
        with self.lock:
            self.loaded.append(flight_id)
            self.live.add(flight_id)
            self.max_live_s = max(self.max_live_s, sum(self.seconds[f] for f in self.live))
        return np.zeros(4, dtype=np.float32)

    def consumed(self, flight_id: str) -> None:
        with self.lock:
            self.live.discard(flight_id)


def _run(flights, prepare_ahead, budget, stop_after=None, workers=1):
    rec = Recorder(dict(flights))
    feed = FlightFeed(flights, rec.load, prepare_ahead=prepare_ahead, budget_s=budget, workers=workers)
    seen = []
    for flight_id, _ in feed:
        time.sleep(0.03)  # the section works on it
        seen.append(flight_id)
        rec.consumed(flight_id)
        if stop_after and len(seen) == stop_after:
            break
    return rec, feed, seen


def test_prepared_ahead_never_exceeds_budget_and_order_is_kept():
    flights = [(f"f{i}", s) for i, s in enumerate([600, 900, 300, 1200, 100, 1800, 50])]
    rec, feed, seen = _run(flights, prepare_ahead=True, budget=1800)
    assert seen == [f for f, _ in flights]
    assert rec.max_live_s <= 1800
    assert feed.max_ahead_s <= 1800


def test_concurrent_preparation_keeps_order_and_budget():
    flights = [(f"f{i}", s) for i, s in enumerate([300, 200, 400, 100, 600, 300, 200, 500])]
    rec, feed, seen = _run(flights, prepare_ahead=True, budget=1000, workers=3)
    assert seen == [f for f, _ in flights]
    assert rec.max_live_s <= 1000 and feed.max_ahead_s <= 1000


def test_a_flight_larger_than_the_budget_still_flows_one_at_a_time():
    flights = [("big", 4000.0), ("small", 10.0)]
    rec, feed, seen = _run(flights, prepare_ahead=True, budget=1800)
    assert seen == ["big", "small"]
    assert rec.max_live_s <= 4000


def test_preparations_are_released_when_the_section_ends_early():
    flights = [(f"f{i}", 100.0) for i in range(30)]
    rec, _, seen = _run(flights, prepare_ahead=True, budget=300, stop_after=2)
    assert seen == ["f0", "f1"]
    # only what fit in the budget ahead was ever prepared; nothing is loaded after the section ended
    assert len(rec.loaded) <= 2 + 3
    settled = list(rec.loaded)
    time.sleep(0.1)
    assert rec.loaded == settled


def test_off_path_loads_serially_inside_the_section():
    flights = [(f"f{i}", 100.0) for i in range(4)]
    rec, feed, seen = _run(flights, prepare_ahead=False, budget=1800)
    assert seen == [f for f, _ in flights]
    assert rec.max_live_s == 100.0
    assert feed.max_ahead_s == 0.0
