"""The code location: asset graph, partitions, GPU pool and tag, cheap load, and the kill switches."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import dagster as dg
import pytest

from batch_assets.definitions import defs
from batch_assets.settings import SettingError, Settings, env_bool, env_fraction, env_int, read_switch_defaults
from batch_assets.switches import EXACT_SWITCHES, SWITCH_ENV_VARS

ASSETS = {"fetched_audio", "prepared_flights", "vad_scores", "diarization", "transcripts", "transcript_exports"}


def test_asset_graph_and_partitions():
    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert keys == ASSETS
    for key in keys:
        partitions = graph.get(dg.AssetKey(key)).partitions_def
        assert isinstance(partitions, dg.DailyPartitionsDefinition)
        assert "2026-01-15" in partitions.get_partition_keys()
    parents = {key: {p.to_user_string() for p in graph.get(dg.AssetKey(key)).parent_keys} for key in keys}
    assert parents["fetched_audio"] == set()
    assert parents["prepared_flights"] == {"fetched_audio"}
    for key in ("vad_scores", "diarization", "transcripts"):
        assert "prepared_flights" in parents[key]
    assert parents["transcript_exports"] == {"transcripts"}


def test_gpu_work_is_pooled_gpu_tagged_shard_steps_between_cpu_steps():
    gpu_defs = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and dg.AssetKey("transcripts") in a.keys]
    assert len(gpu_defs) == 1
    section = gpu_defs[0]
    assert {k.to_user_string() for k in section.keys} == {"vad_scores", "diarization", "transcripts"}
    ops = {op.name: op for op in section.node_def.iterate_op_defs()}
    assert set(ops) == {"plan_gpu_shards", "gpu_shard", "list_leftover_flights", "gpu_leftover", "assemble_gpu_tables"}
    # a GPU only where GPU work is: the shards and the leftover flights (a re-execution's never-started shards)
    for op in (ops["gpu_shard"], ops["gpu_leftover"]):
        assert op.pool == "gpu" and op.retry_policy is not None
        k8s = op.tags["dagster-k8s/config"]
        if isinstance(k8s, str):
            import json

            k8s = json.loads(k8s)
        assert k8s["container_config"]["resources"]["limits"]["nvidia.com/gpu"] in ("1", 1)
    for name in ("plan_gpu_shards", "list_leftover_flights", "assemble_gpu_tables"):  # CPU steps
        assert ops[name].pool is None and "dagster-k8s/config" not in ops[name].tags, name
    for cpu_asset in ("fetched_audio", "prepared_flights"):
        cpu_def = next(a for a in defs.assets if dg.AssetKey(cpu_asset) in a.keys)
        assert cpu_def.op.pool is None
        assert "dagster-k8s/config" not in cpu_def.op.tags


def _python(code: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k not in SWITCH_ENV_VARS.values()}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_code_location_load_imports_no_model_library():
    probe = _python(
        "import sys, time; t=time.perf_counter(); import batch_assets.definitions; "
        "heavy=[m for m in sys.modules if m.split('.')[0] in ('nemo','pyannote','torch','torchaudio','lightning')]; "
        "print(repr(heavy)); print(time.perf_counter()-t)"
    )
    assert probe.returncode == 0, probe.stderr
    heavy, seconds = probe.stdout.strip().splitlines()[-2:]
    assert heavy == "[]"
    print(f"code location import: {float(seconds):.2f} s")


def test_switch_env_defaults_reach_run_config_defaults():
    probe = _python(
        "from batch_assets.gpu.steps.run_config import GpuSectionConfig as C; c=C(); "
        "print(c.prepare_flight_enabled, c.vad_segmentation_reuse_enabled, c.asr_cuda_graphs_enabled)",
        {"BATCH_PIPELINE_VAD_SEGMENTATION_REUSE_ENABLED": "FALSE"},
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["True", "False", "True"]


def test_parse_switch():
    assert env_bool("X", True, {}) is True
    assert env_bool("X", True, {"X": ""}) is True
    assert env_bool("X", False, {"X": " True "}) is True
    assert env_bool("X", True, {"X": "false"}) is False
    for bad in ("0", "no", "off", "flase", "yes"):
        with pytest.raises(SettingError, match="X=.*'true' or 'false'"):
            env_bool("X", True, {"X": bad})
        with pytest.raises(SettingError, match=SWITCH_ENV_VARS["asr_cuda_graphs_enabled"]):
            read_switch_defaults({SWITCH_ENV_VARS["asr_cuda_graphs_enabled"]: bad})
    # the exact levers and the channel path on, half precision and the approximate levers off
    assert read_switch_defaults({}) == {name: name in (*EXACT_SWITCHES, "channel_reading_enabled")
                                        for name in SWITCH_ENV_VARS}
    assert sum(read_switch_defaults({}).values()) == 7


def test_integer_and_fraction_settings_name_the_variable_and_the_range():
    assert env_int("N", 7, 1, 366, {}) == 7
    assert env_int("N", 7, 1, 366, {"N": " 3 "}) == 3
    for bad, what in (("0", "out of range"), ("-3", "out of range"), ("abc", "not an integer"),
                      ("2.5", "not an integer")):
        with pytest.raises(SettingError, match=f"N=.*{what}.*from 1 to 366"):
            env_int("N", 7, 1, 366, {"N": bad})
    assert env_fraction("F", 0.5, {"F": "0.25"}) == 0.25
    with pytest.raises(SettingError, match="F=.*from 0 to 1"):
        env_fraction("F", 0.5, {"F": "2"})


BAD_SETTINGS = [  # (variable, value, what the error must say)
    *((variable, "yes please", f"{variable}='yes please'") for variable in sorted(SWITCH_ENV_VARS.values())),
    ("BATCH_ASSETS_BACKFILL_PARTITIONS_PER_RUN", "0", "BATCH_ASSETS_BACKFILL_PARTITIONS_PER_RUN=0 is out of range"),
    ("BATCH_ASSETS_SCHEDULE_RUNNING", "yes", "BATCH_ASSETS_SCHEDULE_RUNNING='yes' is not a valid boolean"),
    ("BATCH_ASSETS_SHRINK_GUARD_FRACTION", "1.5", "BATCH_ASSETS_SHRINK_GUARD_FRACTION=1.5 is out of range"),
    ("BATCH_ASSETS_DEGRADE_GUARD_FRACTION", "1.5", "BATCH_ASSETS_DEGRADE_GUARD_FRACTION=1.5 is out of range"),
]


def test_bad_settings_stop_the_code_location_naming_each_variable():
    """One process, every bad value at once (one interpreter start instead of one per variable): the code location's
    import fails, and its error names each variable with what is wrong with it; each alone is refused the same way
    by the parser the import runs (`Settings.from_env`)."""
    probe = _python("import batch_assets.definitions", {variable: value for variable, value, _ in BAD_SETTINGS})
    assert probe.returncode != 0
    for variable, _, message in BAD_SETTINGS:
        assert message in probe.stderr, (variable, probe.stderr[-3000:])
    assert "'true' or 'false'" in probe.stderr
    not_an_integer = ("BATCH_ASSETS_BACKFILL_PARTITIONS_PER_RUN", "abc",
                      "BATCH_ASSETS_BACKFILL_PARTITIONS_PER_RUN='abc' is not an integer")
    for variable, value, message in [*BAD_SETTINGS, not_an_integer]:
        with pytest.raises(SettingError, match=re.escape(message)):
            Settings.from_env({variable: value})


@pytest.mark.slow
def test_dagster_cli_asset_selection_works_beside_nemo():
    """`dagster asset list --select` parses with Dagster's ANTLR 4.13 grammar while NeMo's hydra loads
    (fix_antlr.py)."""
    dagster = pathlib.Path(sys.executable).parent / "dagster"
    listed = subprocess.run([str(dagster), "asset", "list", "-m", "batch_assets.definitions", "--select",
                             "key:transcripts"],
                            capture_output=True, text=True, timeout=180, env=os.environ | {"PYTHONWARNINGS": "ignore"})
    assert listed.returncode == 0, listed.stderr[-2000:]
    assert listed.stdout.split() == ["transcripts"]
    grouped = subprocess.run([str(dagster), "asset", "list", "-m", "batch_assets.definitions", "--select", "group:gpu"],
                             capture_output=True, text=True, timeout=180, env=os.environ | {"PYTHONWARNINGS": "ignore"})
    assert sorted(grouped.stdout.split()) == ["diarization", "transcripts", "vad_scores"], grouped.stderr[-2000:]
    probe = _python("import hydra, nemo.collections.asr, pyannote.audio, omegaconf, antlr4; "
                    "from hydra.core.override_parser.overrides_parser import OverridesParser; "
                    "OverridesParser.create().parse_overrides(['a=1']); print(omegaconf.__version__)")
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.split()[-1] == "2.4.0"


def test_the_baseline_gate_exists_only_when_a_baseline_is_configured():
    code = ("from batch_assets.definitions import defs; "
            "print(sorted(k.name for k in defs.resolve_job_def('transcribe_partition')"
            ".asset_layer.asset_graph.asset_check_keys))")
    without, configured = _python(code), _python(code, {"BATCH_ASSETS_BASELINE_URL": "/tmp/baseline-storage"})
    assert without.returncode == 0 and configured.returncode == 0, without.stderr + configured.stderr
    assert "gate_against_baseline" not in without.stdout and "gate_against_baseline" in configured.stdout


def test_every_step_of_the_gpu_section_waits_for_the_lease_as_configured():
    """`lease_wait_seconds`, set once under `ops.gpu_section.config`, reaches every step that takes the partition's
    lease: the plan, the shard and leftover steps, and the assembly (which used to fail at once)."""
    from batch_assets.gpu.steps.run_config import gpu_section_config

    mapped = gpu_section_config.config_fn({"lease_wait_seconds": 42.0})
    takes_lease = {"plan_gpu_shards", "gpu_shard", "gpu_leftover", "assemble_gpu_tables"}
    assert {op for op, values in mapped.items() if values["config"].get("lease_wait_seconds") == 42.0} == takes_lease


def test_the_unwatched_days_sensors_are_stopped_here_and_name_the_variable_that_starts_them():
    """A local `make dev` shows them stopped, each description naming BATCH_ASSETS_SENSORS_RUNNING; the Helm values
    set it (tests/test_k8s.py), and tests/test_unwatched.py runs them on, in a real daemon."""
    sensors = {s.name: s for s in defs.get_repository_def().sensor_defs}
    watching = {"late_audio", "transcripts_freshness", "alert_failed_runs", "alert_failed_checks", "deliver_alerts"}
    assert watching <= set(sensors)
    for name in watching:
        assert sensors[name].default_status == dg.DefaultSensorStatus.STOPPED, name
        assert "BATCH_ASSETS_SENSORS_RUNNING=true" in sensors[name].description, name
    assert sensors["free_dead_runs"].default_status == dg.DefaultSensorStatus.RUNNING
