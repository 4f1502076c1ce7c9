"""Shards: a partition's flights grouped, whole and in plan order, into GPU steps of bounded audio.

Each shard is its own GPU step (pool `gpu`, its own pod and GPU on Kubernetes), so one day spreads over
as many GPUs as the pool allows. The windows of one long unit stay in one shard (each step reads a unit's object
whole, so a unit split over two steps would be read twice). Deterministic: the same plan and limit always give the
same shards. A flight longer than the limit is a shard of its own; a partition with no flights gets one empty shard
(so that its tables are still assembled and written).
"""

from __future__ import annotations

from collections.abc import Sequence


def plan_shards(flights: list[tuple[str, float]], max_audio_s: float,
                joined: Sequence[bool] = ()) -> list[list[str]]:
    """[(flight_id, audio_s)] in plan order -> shards of flight ids, each <= max_audio_s (unless one flight, or a run
    of joined flights, is longer). `joined[i]`: flight i stays in flight i-1's shard (they hold windows of one long
    unit, whose object one step then reads once)."""
    shards: list[list[str]] = []
    current: list[str] = []
    current_s = 0.0
    for i, (flight_id, audio_s) in enumerate(flights):
        if current and current_s + audio_s > max_audio_s and not (i < len(joined) and joined[i]):
            shards.append(current)
            current, current_s = [], 0.0
        current.append(flight_id)
        current_s += audio_s
    shards.append(current)  # the last shard, or the one empty shard of a partition with no flights
    return shards
