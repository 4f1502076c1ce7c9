"""Which flights a GPU step must process: the partition's current plan, its commits, and who owns what.

Why: a re-execution from failure (by hand or by the instance's run retries) reruns only the steps Dagster
chooses. For a dynamic fan-out Dagster 1.13 reruns the mapped steps that had started and never the ones that
had not (`KnownExecutionState` counts the unresolved `gpu_shard[?]` as seen once any of its instances
started, and never reruns it when its producer succeeded and none started), so the shards that had not
started would be skipped and their units published as failed. So the flights are owned in two rounds:

1. a shard step owns its own shard's planned flights (`shard_flights`), nothing more;
2. after the shard steps, a CPU step lists the planned flights still without a valid commit (a shard whose
   step did not run in this run, flights the plan gained since the shards were planned) and emits one
   leftover GPU step per shard they fall in (`leftover_shards`; none when nothing is left). That listing
   step comes after the shards, so a re-execution from failure always runs it again. Leftover steps share
   the work of leftover steps a re-execution does not rerun (`owned_flights`), as above.

Each owner processes its flights that have no valid commit (`FlightCommits.problem`). The assembly, a CPU
step, writes nothing while any planned flight lacks a commit.

A flight's fingerprint is what its results depend on: its units in order with their planned offsets, sample
counts and result classes, each object's size and storage version as listed (`source/objects.py`: a
changed object lists with another version), a window's place in its unit, what the run config gives each unit
(its speaker hints, its declared language) and, for a `units` rerun, which of its units it processes. A commit made
for another fingerprint is redone; what else a commit must match is its identity
(`gpu/outputs/commit_identity.py`). No Dagster.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping

import polars as pl

from batch_assets.gpu.steps.shard_values import ShardSpec
from batch_assets.gpu.steps.shards import plan_shards
from batch_assets.ingest.flights import several_channels
from batch_assets.schema.results import ResultClass
from batch_assets.source.decode import TARGET_SAMPLE_RATE
from batch_assets.source.identity import identity_columns

LEFTOVER_STEP = "gpu_section.gpu_leftover"


@dataclasses.dataclass(frozen=True)
class PlannedFlight:
    flight_id: str
    audio_s: float
    num_units: int
    fingerprint: str
    windowed: tuple[str, ...] = ()  # the long units whose windows the flight holds
    heard_s: float | None = None  # its seconds with each channel of a multichannel unit counted (None: audio_s)

    @property
    def load_s(self) -> float:
        """What the flight weighs in a shard and in the prepare-ahead budget: each channel's seconds of a unit with
        several (it may be read channel by channel, each channel decoded and held: `source/channels.py`)."""
        return self.audio_s if self.heard_s is None else self.heard_s


def shards_of(planned: list[PlannedFlight], shard_audio_seconds: float) -> list[list[str]]:
    """The flights grouped into shards (`plan_shards`), a long unit's windows kept in one shard."""
    joined = [i > 0 and bool(set(f.windowed) & set(planned[i - 1].windowed)) for i, f in enumerate(planned)]
    return plan_shards([(f.flight_id, f.load_s) for f in planned], shard_audio_seconds, joined)


def planned_flights(manifest: pl.DataFrame, plan: pl.DataFrame, flights: pl.DataFrame,
                    units: Iterable[str] | None = None,
                    inputs: Mapping[str, list] | None = None) -> list[PlannedFlight]:
    """The flights the GPU work must process, in plan order: all of them, or (a `units` rerun) those holding one
    of `units` as an `ok` unit; each with its fingerprint. `inputs`: what the run config gives each unit
    (`run_config.unit_inputs`: hints, declared language), in the fingerprint; a `units` rerun's fingerprint names
    the units it processes, so its commits (those units only) never stand for a whole flight's."""
    checksums = {uid: None if identity is None else identity.token()
                 for uid, identity in zip(manifest["unit_id"], identity_columns(manifest), strict=True)}
    chosen = None if units is None else set(units)
    channels = several_channels(manifest)
    heard: dict[str, float] = {}
    by_flight: dict[str, list[list]] = {}
    windowed: dict[str, set[str]] = {}
    wanted: set[str] = set()
    for row in plan.sort("position").iter_rows(named=True):
        part = [row["unit_id"], row["offset_samples"], row["num_samples"], row["result_class"],
                checksums.get(row["unit_id"])]
        if row.get("window") is not None:  # a window: where it starts too (a whole unit's fingerprint is as it was)
            part += [row["window"], row["window_start_s"]]
            windowed.setdefault(row["flight_id"], set()).add(row["unit_id"])
        if inputs is not None:
            part.append(inputs.get(row["unit_id"]))
        by_flight.setdefault(row["flight_id"], []).append(part)
        heard[row["flight_id"]] = (heard.get(row["flight_id"], 0.0)
                                   + row["num_samples"] / TARGET_SAMPLE_RATE * channels.get(row["unit_id"], 1))
        if chosen is None or (row["unit_id"] in chosen and row["result_class"] == str(ResultClass.OK)):
            wanted.add(row["flight_id"])
    out = []
    for row in flights.iter_rows(named=True):
        if chosen is not None and row["flight_id"] not in wanted:
            continue
        parts = by_flight.get(row["flight_id"], [])
        if chosen is not None:
            parts = [*parts, sorted({part[0] for part in parts} & chosen)]
        digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]
        out.append(PlannedFlight(row["flight_id"], float(row["audio_s"]), int(row["num_units"]), digest,
                                 tuple(sorted(windowed.get(row["flight_id"], ()))),
                                 heard.get(row["flight_id"], float(row["audio_s"]))))
    return out


def plan_fingerprint(flights: list[PlannedFlight]) -> str:
    """One digest of a whole plan (which flights, each with its fingerprint)."""
    return hashlib.sha256(json.dumps([[f.flight_id, f.fingerprint] for f in flights]).encode()).hexdigest()[:32]


def shard_mapping_key(partition: str, shard: int) -> str:
    return f"{partition.replace('-', '')}_s{shard:03d}"


def executing_shards(step_keys_to_execute: list[str] | None, partition: str, shards: int) -> list[int]:
    """The shards of `partition` whose leftover steps this run executes: all when the run executes every step (no
    step selection) or lists them again (the unresolved `gpu_leftover[?]` is selected); otherwise those named."""
    every = list(range(shards))
    if step_keys_to_execute is None or f"{LEFTOVER_STEP}[?]" in step_keys_to_execute:
        return every
    pattern = re.compile(re.escape(LEFTOVER_STEP) + r"\[" + re.escape(partition.replace("-", "")) + r"_s(\d{3,})\]")
    return sorted({int(m.group(1)) for key in step_keys_to_execute if (m := pattern.fullmatch(key))} & set(every))


def owned_flights(shard: int, shard_flights: list[list[str]], executing: list[int], planned: list[str]) -> list[str]:
    """The flights of `planned` the leftover step of shard `shard` (one of `executing`) is responsible for, in
    plan order.

    A running step owns its own shard's flights; the flights of each shard whose step does not run go, shard
    by shard, to the running steps in turn; flights in no shard (the plan changed since) likewise, one by one.
    """
    if shard not in executing:
        return []
    owner: dict[str, int] = {}
    for index, flights in enumerate(shard_flights):
        for flight_id in flights:
            owner[flight_id] = index if index in executing else executing[index % len(executing)]
    extra = [f for f in planned if f not in owner]
    for i, flight_id in enumerate(extra):
        owner[flight_id] = executing[i % len(executing)]
    return [f for f in planned if owner[f] == shard]


def leftover_shards(planned: list[PlannedFlight], left: Iterable[str], shard_audio_seconds: float) -> list[list[str]]:
    """The flights of `left` (planned, without a valid commit after the shard steps), grouped by the shard the
    current plan puts them in (`plan_shards`, as the plan step groups them): one list per shard, in plan order,
    empty where a shard has nothing left."""
    left = set(left)
    return [[f for f in flights if f in left]
            for flights in shards_of(planned, shard_audio_seconds)]


def shard_specs(partition: str, groups: list[list[str]], planned: list[PlannedFlight],
                units: Iterable[str] | None) -> list[ShardSpec]:
    """One spec per group of flights (a shard's, or a shard's leftovers), each with every group and its audio
    seconds; `units`: those of a `units` rerun, None for the whole partition."""
    seconds = {f.flight_id: f.audio_s for f in planned}
    chosen = sorted(units) if units is not None else None
    return [ShardSpec(partition, index, len(groups), flights, groups, round(sum(seconds[f] for f in flights), 3),
                      chosen) for index, flights in enumerate(groups)]
