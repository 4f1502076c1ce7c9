"""The typed values between the GPU section's steps (`gpu/shard_values.py`) through the JSON IO manager, and those
an older deploy wrote as plain dicts (a run re-executed across a deploy) read back as the same types."""

from __future__ import annotations

import json

import dagster as dg

from batch_assets.gpu.assets import gpu_shard
from batch_assets.gpu.shard_values import ShardReport, ShardSpec, from_json, to_json
from batch_assets.io_manager import StorageJsonIOManager
from batch_assets.storage import StorageResource

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
    assert ShardSpec.of(old_spec).shard_flights == [[], ["flight-0002"]]
    old_report = {"partition": "2026-01-15", "shard": "finish", "flights": ["flight-0002"], "units": None, "audio_s": 61.5,
                  "resumed_flights": [], "run_id": "r1", "switches": {}, "processed_flights": [], "section": None,
                  "model_load_seconds": None, "step_peak_rss_mib": None}
    report = ShardReport.of(old_report)
    assert (report.shards, report.taken_over, report.shard) == (1, [], "finish")


def test_the_io_manager_reads_an_untagged_spec_as_a_shard_spec(tmp_path):
    storage = StorageResource(source_url=str(tmp_path / "source"), storage_url=str(tmp_path / "storage"))
    manager = StorageJsonIOManager(storage=storage)
    key = dg.AssetKey("x")
    out = dg.build_output_context(step_key="gpu_section.plan_gpu_shards", name="result", mapping_key="20260115_s001",
                                  run_id="r1", asset_key=key)
    manager.handle_output(out, SPEC)
    assert json.loads(storage.read_bytes(manager._url(out)))["__type__"] == "ShardSpec"
    storage.write_bytes(manager._url(out), json.dumps({k: v for k, v in to_json(SPEC).items() if k != "__type__"}).encode())
    shard_input = gpu_shard.ins["shard"].dagster_type  # what the shard step's input is typed as
    loaded = manager.load_input(dg.build_input_context(upstream_output=out, dagster_type=shard_input))
    assert loaded == SPEC
