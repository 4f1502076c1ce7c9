"""One registry of kill switches (`batch_assets/switches.py`): run config, Levers, Helm values and docs/gpu-section.md
agree with it."""

from __future__ import annotations

import dataclasses

import yaml

from batch_assets.gpu.section.levers import Levers
from batch_assets.gpu.steps.run_config import GpuSectionConfig, LeverConfig
from batch_assets.storage.resource import REPO_ROOT
from batch_assets.switches import (
    APPROXIMATE_SWITCHES,
    EXACT_SWITCHES,
    SWITCH_ENV_VARS,
    SWITCHES,
    helm_env,
    readme_table,
)

NAMES = [s.name for s in SWITCHES]


def test_switch_names_and_variables_are_unique_and_well_formed():
    assert len(set(NAMES)) == len(NAMES) == len(set(SWITCH_ENV_VARS.values()))
    for switch in SWITCHES:
        assert switch.name.endswith("_enabled") and switch.env_var == f"BATCH_PIPELINE_{switch.name.upper()}"
        assert switch.description and switch.helm_value in ("true", "false")


def test_run_config_has_exactly_the_registry_switches_with_its_descriptions():
    fields = {name: f for name, f in LeverConfig.model_fields.items() if f.annotation is bool}
    assert list(fields) == NAMES
    for switch in SWITCHES:
        assert (switch.description in fields[switch.name].description
                and switch.env_var in fields[switch.name].description)
    for switch in SWITCHES:  # the launchpad's YAML example shows every switch, at its default
        assert f"{switch.name}: {str(switch.default).lower()}" in GpuSectionConfig.__doc__
        assert switch.helm_value == str(switch.default).lower()


def test_the_result_changing_switches_are_the_ones_every_commit_judging_step_reads():
    """A flight's commit records the result-changing switches (gpu/outputs/commit_identity.py); the leftover listing and
    the assembly read them from ResultSwitchConfig, the shard steps from LeverConfig."""
    from batch_assets.gpu.outputs.commit_identity import RESULT_SWITCHES
    from batch_assets.gpu.steps.run_config import AssembleConfig, ExactLeverConfig, ListConfig, ResultSwitchConfig
    from batch_assets.switches import EXACT_SWITCHES

    assert list(ResultSwitchConfig.model_fields) == list(RESULT_SWITCHES)
    assert list(ExactLeverConfig.model_fields) == list(EXACT_SWITCHES)
    for config in (ListConfig, AssembleConfig):
        assert set(RESULT_SWITCHES) <= set(config.model_fields) and not set(EXACT_SWITCHES) & set(config.model_fields)


def test_the_typed_core_has_a_lever_per_switch():
    bools = [f.name for f in dataclasses.fields(Levers) if f.type in (bool, "bool")]
    assert bools == NAMES


def test_helm_values_carry_every_switch_made_from_the_registry():
    text = (REPO_ROOT / "k8s" / "values.yaml").read_text()
    assert helm_env() in text, "k8s/values.yaml: paste the env entries printed by `python -m batch_assets.switches`"
    env = yaml.safe_load(text)["dagster-user-deployments"]["deployments"][0]["env"]
    switches = {e["name"]: e["value"] for e in env if e["name"].startswith("BATCH_PIPELINE_")}
    assert switches == {s.env_var: s.helm_value for s in SWITCHES}


def test_readme_table_is_made_from_the_registry():
    text = (REPO_ROOT / "docs" / "gpu-section.md").read_text()
    assert readme_table() in text, "docs/gpu-section.md: paste the table printed by `python -m batch_assets.switches`"


def test_the_approximate_levers_are_named_off_by_default_and_apart_from_the_exact_ones():
    assert APPROXIMATE_SWITCHES == ("embedding_trunk_blocks_enabled", "embedding_skip_covered_enabled")
    for switch in SWITCHES:
        assert switch.kind in ("exact", "numbers", "approximate", "path")
        assert (switch.kind in ("exact", "path")) == switch.default
        assert switch.description.startswith("APPROXIMATE:") == (switch.kind == "approximate")
    assert [s.name for s in SWITCHES if s.kind == "numbers"] == ["half_precision_enabled", "tf32_enabled"]
    assert [s.name for s in SWITCHES if s.kind == "path"] == ["channel_reading_enabled"]
    assert set(EXACT_SWITCHES) | set(APPROXIMATE_SWITCHES) | {"half_precision_enabled", "tf32_enabled",
                                                               "channel_reading_enabled"} == set(NAMES)
    # what a diarization call reads of them (`DiarizationCall`'s fields)
    options = Levers(embedding_trunk_blocks_enabled=True).embedding_options()
    assert options == {"shared_trunk": True, "half_precision": False, "trunk_blocks": True, "skip_covered": False}
