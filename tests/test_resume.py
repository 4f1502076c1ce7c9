"""Which flights each GPU step of a re-execution owns, and which are left over (batch_assets/gpu/steps/resume.py), on
plain values.

The end-to-end cases (real kills, real re-executions) are in tests/test_deployed.py; these pin the rules.
"""

import polars as pl

from batch_assets.gpu.steps.resume import (
    PlannedFlight,
    executing_shards,
    leftover_shards,
    owned_flights,
    plan_fingerprint,
    planned_flights,
)

P = "2026-02-01"
SHARDS = [["f0", "f1"], ["f2", "f3"], ["f4"]]
PLANNED = ["f0", "f1", "f2", "f3", "f4"]


def test_a_run_that_executes_every_step_runs_every_leftover_step():
    assert executing_shards(None, P, 3) == [0, 1, 2]
    assert executing_shards(["gpu_section.list_leftover_flights", "gpu_section.gpu_leftover[?]"], P, 3) == [0, 1, 2]


def test_a_reexecution_runs_the_leftover_steps_it_names_for_this_partition_only():
    keys = ["gpu_section.gpu_leftover[20260201_s001]", "gpu_section.gpu_leftover[20260202_s000]",
            "gpu_section.gpu_shard[20260201_s002]", "gpu_section.assemble_gpu_tables"]
    assert executing_shards(keys, P, 3) == [1]  # not the shard step's key
    assert executing_shards(["gpu_section.assemble_gpu_tables"], P, 3) == []


def test_leftover_flights_are_grouped_by_the_shard_the_plan_puts_them_in():
    planned = [PlannedFlight(f, 40.0, 1, "x") for f in PLANNED]  # 90 s shards: as SHARDS
    assert leftover_shards(planned, [], 90.0) == [[], [], []]  # nothing left: no leftover step
    assert leftover_shards(planned, ["f4", "f2", "f3"], 90.0) == [[], ["f2", "f3"], ["f4"]]
    assert leftover_shards(planned, ["f1", "gone"], 90.0) == [["f1"], [], []]  # only planned flights
    assert leftover_shards(planned, PLANNED, 1000.0) == [PLANNED]


def test_every_leftover_flight_has_exactly_one_owner_among_the_leftover_steps_that_run():
    for executing in ([0, 1, 2], [0], [1], [0, 2], [2]):
        owned = {shard: owned_flights(shard, SHARDS, executing, PLANNED + ["f5"]) for shard in range(3)}
        flat = [f for flights in owned.values() for f in flights]
        assert sorted(flat) == sorted(PLANNED + ["f5"]), (executing, owned)  # none dropped, none twice
        assert all(not owned[s] for s in range(3) if s not in executing)
        for shard in executing:  # a running step keeps its own shard's flights
            assert set(SHARDS[shard]) <= set(owned[shard])
    assert owned_flights(0, SHARDS, [0], PLANNED) == PLANNED  # the only running step takes over the rest
    assert owned_flights(1, SHARDS, [1], ["f2", "f3"]) == ["f2", "f3"]  # flights no longer planned are dropped


def test_a_flights_fingerprint_follows_its_units_and_their_listed_objects():
    manifest = pl.DataFrame({"unit_id": ["a", "b"], "bytes": [100, 200], "etag": ["e1", "e2"],
                             "version_id": [None, "v2"], "mtime_ns": [None, None]},
                            schema_overrides={"version_id": pl.String, "mtime_ns": pl.Int64})
    plan = pl.DataFrame({"flight_id": ["f0", "f0"], "unit_id": ["a", "b"], "position": [0, 1],
                         "offset_samples": [0, 10], "num_samples": [10, 20], "result_class": ["ok", "ok"]})
    flights = pl.DataFrame({"flight_id": ["f0"], "num_units": [2], "audio_s": [1.0]})
    [first] = planned_flights(manifest, plan, flights)
    [moved] = planned_flights(manifest, plan, flights.with_columns(pl.lit(9.0).alias("audio_s")))
    assert first.fingerprint == moved.fingerprint  # rematerialized, same units and objects: the commit is still good
    [changed] = planned_flights(manifest.with_columns(pl.Series("etag", ["e1", "e3"])), plan, flights)
    assert changed.fingerprint != first.fingerprint  # the object changed (another ETag listed): redo
    [versioned] = planned_flights(manifest.with_columns(pl.Series("version_id", ["v1", "v2"])), plan, flights)
    assert versioned.fingerprint not in (first.fingerprint, changed.fingerprint)  # another version of `a` listed
    [resized] = planned_flights(manifest.with_columns(pl.Series("bytes", [100, 201])), plan, flights)
    assert resized.fingerprint not in (first.fingerprint, changed.fingerprint)
    # a `units` rerun's commits hold those units only: never taken for the whole flight's, nor another selection's
    [only_b] = planned_flights(manifest, plan, flights, units=["b"])
    assert only_b.flight_id == "f0" and only_b.fingerprint != first.fingerprint
    assert planned_flights(manifest, plan, flights, units=["b", "zzz"]) == [only_b]
    assert planned_flights(manifest, plan, flights, units=["a", "b"])[0].fingerprint not in (first.fingerprint,
                                                                                            only_b.fingerprint)
    assert planned_flights(manifest, plan, flights, units=["zzz"]) == []
    # what the run config gives a unit (its hints, its declared language) is in its flight's fingerprint
    inputs = {"a": [[None, None, None], [None, None, None]], "b": [[None, None, None], [None, None, None]]}
    [plain] = planned_flights(manifest, plan, flights, inputs=inputs)
    [hinted] = planned_flights(manifest, plan, flights, inputs=inputs | {"b": [[2, None, None], [None, None, None]]})
    [declared] = planned_flights(manifest, plan, flights, inputs=inputs | {"a": [[None, None, None],
                                                                                 ["en", "run_config", None]]})
    assert len({plain.fingerprint, hinted.fingerprint, declared.fingerprint}) == 3
    assert plan_fingerprint([first]) == plan_fingerprint([moved]) != plan_fingerprint([changed])
