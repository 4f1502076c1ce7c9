"""The typed values the GPU section's steps pass each other: a shard's spec and a shard's report. No Dagster.

`plan_gpu_shards` yields one `ShardSpec` per shard and `list_leftover_flights` one per shard with flights left
without a commit; each `gpu_shard` and `gpu_leftover` step returns a `ShardReport`; the assembly reads them all.
They travel between steps (pods, on Kubernetes) as JSON in the project's storage
(`orchestration/io_manager.py`), tagged with their type, and are read back as the same dataclasses. A value
written by an older deploy (a run re-executed across one) is read back as a plain dict, which `from_json` turns into the
dataclass: the IO manager does so by the type the writing step declares for its output, so the shard step's
spec and each of the assembly's reports arrive typed.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class ShardSpec:
    """One GPU step's share of a partition: its flights, in plan order, and how the partition was sharded (for a
    leftover step: the flights left in its shard, and those left in every shard)."""

    partition: str
    shard: int
    shards: int
    flights: list[str]
    # every shard's flights (a leftover step's: those left in every shard), so that a leftover step can take over
    # those of the leftover steps a re-execution does not rerun
    shard_flights: list[list[str]]
    audio_s: float
    units: list[str] | None  # a `units` rerun's unit ids; None: the whole partition

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ShardSpec:
        # a spec from before `shard_flights` existed knows only its own flights
        known = value.get("shard_flights") or [value["flights"] if i == value["shard"] else []
                                               for i in range(value["shards"])]
        return cls(value["partition"], value["shard"], value["shards"], list(value["flights"]), known,
                   value["audio_s"], value.get("units"))


@dataclasses.dataclass(frozen=True)
class ShardReport:
    """What one GPU step (a shard step, or with `leftover` a leftover step) did with its flights.

    `section` is the section's figures (`runner.SectionReport.to_metadata`), None when the step processed no
    flight (every one already committed, or the partition already assembled)."""

    partition: str
    shard: int | str
    shards: int
    flights: list[str]  # the flights it owned: its own and (a leftover step) any it took over
    units: list[str] | None
    audio_s: float
    taken_over: list[str]
    resumed_flights: list[str]  # owned flights whose valid commits were reused, not processed again
    run_id: str = ""  # the run whose step did the work (a re-execution loads its parent's reports)
    switches: dict[str, bool] = dataclasses.field(default_factory=dict)
    processed_flights: list[str] = dataclasses.field(default_factory=list)
    section: dict[str, Any] | None = None
    model_load_seconds: float | None = None
    step_peak_rss_mib: float | None = None
    device: str | None = None
    leftover: bool = False  # a leftover step's report (flights no shard step of the run committed)
    # owned flights whose commit was found but not valid (another plan, another deployment, cut off): flight -> why
    redone: dict[str, str] = dataclasses.field(default_factory=dict)
    # owned flights whose valid commit another root run made (a stopped, failed or killed run): flight -> its run
    reused_from: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ShardReport:
        fields = {f.name for f in dataclasses.fields(cls)}
        # an older deploy's assembly finished leftover flights itself and reported them as shard "finish"
        return cls(**{k: v for k, v in value.items() if k in fields} | {
            "shards": value.get("shards", 1), "taken_over": value.get("taken_over", []),
            "leftover": value.get("leftover", value.get("shard") == "finish")})


VALUE_TYPES: dict[str, type] = {cls.__name__: cls for cls in (ShardSpec, ShardReport)}
TYPE_KEY = "__type__"


def to_json(value: Any) -> Any:
    """A step value as JSON: a dataclass above as its fields plus its type's name."""
    if dataclasses.is_dataclass(value) and type(value).__name__ in VALUE_TYPES:
        return {TYPE_KEY: type(value).__name__, **dataclasses.asdict(value)}
    return value


def from_json(value: Any) -> Any:
    """The step value `to_json` wrote (a plain value is returned as it is)."""
    if isinstance(value, dict) and value.get(TYPE_KEY) in VALUE_TYPES:
        fields = {k: v for k, v in value.items() if k != TYPE_KEY}
        return VALUE_TYPES[value[TYPE_KEY]].from_json(fields)
    return value
