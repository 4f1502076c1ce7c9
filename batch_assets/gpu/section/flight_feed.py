"""Feed flights' decoded audio to the GPU section, preparing the next ones in the background (lever 1).

With preparation on, while the section works on one flight background threads (`workers`, the run config's
`prepare_workers`) load the next flights, never more than the decode budget ahead (at least one flight, even if
it alone exceeds it), each flight's units fetched and decoded concurrently (`load`: `source/flight_audio.py:
FlightSource.load`, the run config's `fetch_workers`); whatever was prepared and not consumed is released when the
section ends. With preparation off, each flight is loaded inside the section, one unit after another: the serial
baseline.
"""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable, Iterator

import numpy as np


class FlightFeed:
    def __init__(
        self,
        flights: list[tuple[str, float]],
        load: Callable[[str], np.ndarray],
        prepare_ahead: bool,
        budget_s: float,
        workers: int = 1,
    ):
        self.flights = flights
        self.load = load
        self.prepare_ahead = prepare_ahead
        self.budget_s = budget_s
        self.workers = max(1, workers)  # flights prepared concurrently (still never more than the budget ahead)
        self.max_ahead_s = 0.0
        self.load_wait_s = 0.0

    def __iter__(self) -> Iterator[tuple[str, np.ndarray]]:
        import time

        if not self.prepare_ahead:
            for flight_id, _ in self.flights:
                started = time.perf_counter()
                audio = self.load(flight_id)
                self.load_wait_s += time.perf_counter() - started
                yield flight_id, audio
            return
        pending: collections.deque = collections.deque()
        upcoming = collections.deque(self.flights)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="prepare-flight")
        try:
            while upcoming or pending:
                ahead = sum(seconds for _, seconds, _ in pending)
                while upcoming and (not pending or ahead + upcoming[0][1] <= self.budget_s):
                    flight_id, seconds = upcoming.popleft()
                    pending.append((flight_id, seconds, pool.submit(self.load, flight_id)))
                    ahead += seconds
                self.max_ahead_s = max(self.max_ahead_s, ahead)
                flight_id, _, future = pending.popleft()
                started = time.perf_counter()
                audio = future.result()
                self.load_wait_s += time.perf_counter() - started
                yield flight_id, audio
        finally:
            for _, _, future in pending:  # release preparations the section will not use
                future.cancel()
            pending.clear()
            pool.shutdown(wait=True, cancel_futures=True)
