"""The typed values between the GPU section's steps (`gpu/steps/shard_values.py`) through the JSON IO manager, and those
an older deploy wrote as plain dicts (a run re-executed across a deploy) read back as the same types."""

from __future__ import annotations

import json

import dagster as dg

from batch_assets.gpu.assets import assemble_gpu_tables, gpu_leftover, gpu_shard, list_leftover_flights, plan_gpu_shards
from batch_assets.gpu.steps.shard_values import ShardReport, ShardSpec, from_json, to_json
from batch_assets.orchestration.io_manager import StorageJsonIOManager
from batch_assets.storage.resource import StorageResource

SPEC = ShardSpec("2026-01-15", 1, 2, ["flight-0002"], [["flight-0000", "flight-0001"], ["flight-0002"]], 61.5, None)
REPORT = ShardReport("2026-01-15", 1, 2, ["flight-0002"], None, 61.5, taken_over=[], resumed_flights=[],
                     run_id="r1", switches={"host_overlap_enabled": True}, processed_flights=["flight-0002"],
                     section={"section_seconds": 3.2}, model_load_seconds=1.5, step_peak_rss_mib=900.0, device="cpu")


def test_values_round_trip_through_json_as_their_types():
    for value in (SPEC, REPORT):
        assert from_json(json.loads(json.dumps(to_json(value)))) == value


def test_an_older_deploys_plain_dicts_read_as_the_types():
    old_spec = {"partition": "2026-01-15", "shard": 1, "shards": 2, "flights": ["flight-0002"], "audio_s": 61.5,
                "units": None}  # before shard_flights: only its own flights known
    assert ShardSpec.from_json(old_spec).shard_flights == [[], ["flight-0002"]]
    old_report = {"partition": "2026-01-15", "shard": "finish", "flights": ["flight-0002"], "units": None,
                  "audio_s": 61.5, "resumed_flights": [], "run_id": "r1", "switches": {}, "processed_flights": [],
                  "section": None, "model_load_seconds": None, "step_peak_rss_mib": None}
    report = ShardReport.from_json(old_report)  # the assembly's own, when it finished leftover flights itself
    assert (report.shards, report.taken_over, report.shard, report.leftover) == (1, [], "finish", True)
    assert not ShardReport.from_json(old_report | {"shard": 0}).leftover


def _write_untagged(manager: StorageJsonIOManager, step: dg.OpDefinition, value, mapping_key: str | None = None):
    """`value` written by `step` as an older deploy did (no type tag); the output context carries the type the step
    declares now, as a run's does."""
    out = dg.build_output_context(step_key=f"gpu_section.{step.name}", name="result", mapping_key=mapping_key,
                                  run_id="r1", asset_key=dg.AssetKey("x"),
                                  dagster_type=step.output_defs[0].dagster_type)
    manager.handle_output(out, value)
    assert json.loads(manager.storage.read_bytes(manager._url(out)))["__type__"] == type(value).__name__
    manager.storage.write_bytes(manager._url(out),
                                json.dumps({k: v for k, v in to_json(value).items() if k != "__type__"}).encode())
    return out


def test_the_io_manager_reads_untagged_values_as_the_types_their_steps_declare(tmp_path):
    manager = StorageJsonIOManager(storage=StorageResource(source_url=str(tmp_path / "source"),
                                                           storage_url=str(tmp_path / "storage")))
    for planner, step in ((plan_gpu_shards, gpu_shard), (list_leftover_flights, gpu_leftover)):
        spec_out = _write_untagged(manager, planner, SPEC, "20260115_s001")
        loaded = manager.load_input(dg.build_input_context(upstream_output=spec_out,
                                                           dagster_type=step.ins["shard"].dagster_type))
        assert loaded == SPEC
    # the assembly's fan-in: each report is loaded alone, with its own upstream output's type
    report_out = _write_untagged(manager, gpu_shard, REPORT, "20260115_s001")
    reports_in = assemble_gpu_tables.ins["reports"].dagster_type
    loaded = manager.load_input(dg.build_input_context(upstream_output=report_out, dagster_type=reports_in))
    assert loaded == REPORT
    assert reports_in.type_check(dg.build_op_context(), [loaded]).success
    assert not reports_in.type_check(dg.build_op_context(), [to_json(REPORT)]).success  # a dict is refused
