"""The one `Settings` object: every bad variable named at once, the token never shown, resources built from it,
and `batch-assets run`'s flags reaching the process that set them."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import subprocess
import sys

import dagster as dg
import pytest

from batch_assets.cli.commands import RUN_SETTINGS
from batch_assets.definitions import build_resources
from batch_assets.settings import SettingError, Settings, variable_names


def test_every_bad_variable_is_named_in_one_error():
    bad = {"BATCH_ASSETS_TORCH_THREADS": "-1", "BATCH_ASSETS_PARTITIONS_START": "15.01.2026",
           "BATCH_ASSETS_EXECUTOR": "kubernetes", "BATCH_PIPELINE_HOST_OVERLAP_ENABLED": "yes",
           "BATCH_ASSETS_FRESHNESS_DEADLINE": "9am", "BATCH_ASSETS_LATE_AUDIO_DAYS": "0"}
    with pytest.raises(SettingError) as raised:
        Settings.from_env(bad)
    lines = str(raised.value).splitlines()
    assert sorted(line.split("=", 1)[0] for line in lines) == sorted(bad)
    assert "BATCH_ASSETS_PARTITIONS_START='15.01.2026' is not a day: use YYYY-MM-DD (e.g. 2026-01-01)" in lines
    assert "BATCH_ASSETS_FRESHNESS_DEADLINE='9am' is not a time of day: use HH:MM, 24-hour, UTC (e.g. 09:00)" in lines


def test_defaults_and_values_are_typed():
    default, given = Settings.from_env({}), Settings.from_env({
        "BATCH_ASSETS_SHARD_AUDIO_SECONDS": " 600 ", "BATCH_ASSETS_MODEL_CACHE": "~/models",
        "AWS_DEFAULT_REGION": "eu-west-1", "BATCH_ASSETS_EXECUTOR": "K8S",
        "BATCH_PIPELINE_HALF_PRECISION_ENABLED": "true", "BATCH_ASSETS_FRESHNESS_DEADLINE": "9:05"})
    assert (default.shard_audio_seconds, given.shard_audio_seconds) == (90000, 600)
    assert given.model_cache == pathlib.Path("~/models").expanduser()
    assert (default.freshness_deadline, given.freshness_deadline, default.late_audio_days) == ("09:00", "09:05", 7)
    assert (default.s3_region, given.s3_region, given.executor) == (None, "eu-west-1", "k8s")
    assert (default.switch_defaults["half_precision_enabled"],
            given.switch_defaults["half_precision_enabled"]) == (False, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        given.shard_audio_seconds = 1  # type: ignore[misc]


def test_the_token_and_the_webhook_are_never_shown():
    settings = Settings.from_env({"HF_TOKEN": "hf_secret_value", "BATCH_ASSETS_ALERT_WEBHOOK_URL": "https://hook/T0"})
    assert settings.hf_token == "hf_secret_value" and settings.alert_webhook_url == "https://hook/T0"
    for secret in ("hf_secret_value", "hook/T0"):
        assert secret not in repr(settings) and secret not in str(settings)


def test_resource_strings_come_from_their_variable_when_set():
    set_ = build_resources(Settings.from_env({"BATCH_ASSETS_SOURCE_URL": "s3://b/audio", "AWS_DEFAULT_REGION": "eu",
                                              "BATCH_ASSETS_DEVICE": "cpu"}))
    unset = build_resources(Settings.from_env({}))
    assert (isinstance(set_["storage"].source_url, dg.EnvVar)
            and set_["storage"].source_url.env_var_name == "BATCH_ASSETS_SOURCE_URL")
    assert set_["storage"].s3_region.env_var_name == "AWS_DEFAULT_REGION"  # the first of its variables that is set
    assert set_["gpu"].device.env_var_name == "BATCH_ASSETS_DEVICE"
    assert not isinstance(unset["storage"].source_url, dg.EnvVar) and unset["gpu"].device == "auto"
    assert unset["storage"].source_url == Settings.from_env({}).source_url and unset["baseline"].storage_url == ""


def test_a_padded_value_reaches_the_resource_as_the_settings_read_it():
    """Settings drop a value's surrounding spaces; a `dg.EnvVar` would hand the step the raw value (`"cuda "`, a
    storage URL ending in a space): such a variable goes to its resource as the stripped value."""
    environ = {"BATCH_ASSETS_DEVICE": "cpu ", "BATCH_ASSETS_STORAGE_URL": " s3://b/out", "AWS_REGION": "eu"}
    settings = Settings.from_env(environ)
    resources = build_resources(settings)
    assert resources["gpu"].device == "cpu" and resources["storage"].storage_url == "s3://b/out"
    assert resources["storage"].s3_region.env_var_name == "AWS_REGION"  # unpadded: still shown as its variable


def test_each_run_flag_sets_a_settings_variable():
    ours = variable_names()
    assert {variable for _, variable, _, _ in RUN_SETTINGS} <= ours


def test_run_flags_reach_the_settings_of_the_process_that_set_them(tmp_path):
    """`batch-assets run --source ... --asr-model ...`: the CLI read its settings when it was imported; the flags set
    the variables afterwards, and the storage it prints its summary from must be the one the run writes to."""
    code = ("import argparse, batch_assets.cli.commands as cli\n"
            "from batch_assets.settings import current_settings\n"
            "before = current_settings().source_url\n"
            f"cli.apply_run_settings(argparse.Namespace(source={str(tmp_path)!r}, storage=None, asr_model='m', "
            "asr_models=None, diarization_pipeline=None, device=None))\n"
            "from batch_assets.definitions import storage_from_env\n"
            "print(before); print(storage_from_env().source_url); print(current_settings().asr_model)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("BATCH_ASSETS_SOURCE_URL", "BATCH_ASSETS_ASR_MODEL")}
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert probe.returncode == 0, probe.stderr
    before, source, asr = probe.stdout.split()
    assert before != str(tmp_path) and (source, asr) == (str(tmp_path), "m")


def test_the_cli_names_a_bad_setting_in_one_line():
    env = os.environ | {"BATCH_ASSETS_EXECUTOR": "kubernetes", "BATCH_ASSETS_TORCH_THREADS": "-1"}
    probe = subprocess.run([sys.executable, "-m", "batch_assets.cli", "show"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert probe.returncode == 2 and "Traceback" not in probe.stderr, probe.stderr
    assert "batch-assets: BATCH_ASSETS_TORCH_THREADS=-1 is out of range" in probe.stderr
    assert "BATCH_ASSETS_EXECUTOR='kubernetes' is not one of the choices" in probe.stderr
