"""Every setting read from the environment: one frozen `Settings`, built once per process by one strict parser.

`Settings` declares each variable the code reads (but `DAGSTER_HOME`, Dagster's own), in one place: its field
(typed), its variable(s), how it is parsed, its default and the README's row (`python -m batch_assets.settings`
prints the table the README holds; `tests/test_readme_settings.py` fails when they differ). `current_settings()`
builds it on first use and keeps it for the process: the code location reads it when it loads (the partitions, the
config fields' defaults, the schedule, the executor and `definitions.build_resources`), and a step process reads the
same values from the same environment. A value that does not parse, or lies outside the accepted range, stops it
with an error naming every such variable, what it held and what it accepts: a typo in a deployment must never
silently mean something else (`0` runs per backfill, `yes` for a schedule that then stays off). String settings of
resources (URLs, model names, the device) become `dg.EnvVar`s when set (`Settings.resource_value`), so the UI shows
where a value came from and each run resolves it from its own environment; one with spaces around it goes in as
the stripped value these settings read, since the `dg.EnvVar` would resolve the raw one. `batch-assets run`'s flags
set variables, then `reload_settings()`; nothing else changes the settings of a running process.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import types
from collections.abc import Callable, Mapping
from typing import Any

import dagster as dg

from batch_assets.gpu.device.lock import DEFAULT_LOCK_DIR
from batch_assets.models.languages import DEFAULT_ROUTING, TINY_LANGID, with_english
from batch_assets.models.names import TINY_DIARIZATION
from batch_assets.setting_parsers import (  # noqa: F401 (SettingError: also imported from here)
    SettingError,
    _raw,
    env_bool,
    env_choice,
    env_clock,
    env_day,
    env_fraction,
    env_int,
    env_path,
    env_routing,
    env_str,
    read_each,
)
from batch_assets.storage.resource import DEFAULT_SOURCE_URL, DEFAULT_STORAGE_URL
from batch_assets.switches import SWITCHES


def read_switch_defaults(environ: Mapping[str, str] | None = None) -> dict[str, bool]:
    """Each switch's deployment default (`switches.SWITCHES`): unset or empty means the registry's default."""
    return read_each({switch.name: functools.partial(env_bool, switch.env_var, switch.default, environ)
                      for switch in SWITCHES})


@dataclasses.dataclass(frozen=True)
class Variable:
    """How one `Settings` field is read: from the first of `names` that is set, by `parse(name, environ=...)`."""

    names: tuple[str, ...]
    parse: Callable[..., Any]  # one of the parsers above with its default (and range) bound
    default_cell: str  # the README's default column
    what: str  # the README's last column

    def read(self, environ: Mapping[str, str]) -> Any:
        name = next((n for n in self.names if _raw(n, environ) is not None), self.names[0])
        return self.parse(name, environ=environ)

    def readme_row(self) -> str:
        return f"| {', '.join(f'`{n}`' for n in self.names)} | {self.default_cell} | {self.what} |"


def _variable(names: str | tuple[str, ...], parse: Callable[..., Any], default_cell: str, what: str, **field) -> Any:
    names = (names,) if isinstance(names, str) else names
    return dataclasses.field(metadata={"variable": Variable(names, parse, default_cell, what)}, **field)


def _p(parser: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """`parser` with its default (and range) bound: called as `parse(name, environ=...)`."""
    return lambda name, *, environ: parser(name, *args, environ=environ)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every variable the code reads but `DAGSTER_HOME` (README: Configuration, generated from these fields)."""

    source_url: str = _variable("BATCH_ASSETS_SOURCE_URL", _p(env_str, DEFAULT_SOURCE_URL),
                                "`sample_data/audio` (checkout)",
                                "audio root (folder or `s3://…`); partition = `{root}/YYYY-MM-DD/`")
    storage_url: str = _variable("BATCH_ASSETS_STORAGE_URL", _p(env_str, DEFAULT_STORAGE_URL), "`storage/` (checkout)",
                                 "root of every output table and array")
    s3_endpoint_url: str | None = _variable("BATCH_ASSETS_S3_ENDPOINT_URL", _p(env_str), "none: AWS",
                                            "any S3 API (MinIO, …)")
    s3_region: str | None = _variable(("AWS_REGION", "AWS_DEFAULT_REGION"), _p(env_str), "none: the AWS chain's",
                                      "S3 region (`AWS_REGION` first)")
    baseline_url: str | None = _variable("BATCH_ASSETS_BASELINE_URL", _p(env_str), "none",
                                         "a baseline run's storage root: adds the `gate_against_baseline` check")
    asr_models: Mapping[str, str] = _variable(
        "BATCH_ASSETS_ASR_MODELS", _p(env_routing, DEFAULT_ROUTING), f"`{DEFAULT_ROUTING}`",
        "language -> NeMo ASR model: `builtin`, `production` or `en=MODEL,es=MODEL` (after a preset: replaces or adds; "
        "[languages](docs/languages.md))")
    asr_model: str | None = _variable("BATCH_ASSETS_ASR_MODEL", _p(env_str), "none: the routing's",
                                      "the `en` model of the routing (name, `.nemo` path or builtin)")
    language_id_model: str = _variable("BATCH_ASSETS_LANGUAGE_ID_MODEL", _p(env_str, TINY_LANGID), f"`{TINY_LANGID}`",
                                       "language identification: `langid_ambernet`, a `.nemo` path or builtin")
    diarization_pipeline: str = _variable("BATCH_ASSETS_DIARIZATION_PIPELINE", _p(env_str, TINY_DIARIZATION),
                                          f"`{TINY_DIARIZATION}`", "pyannote pipeline: name, folder or builtin")
    device: str = _variable("BATCH_ASSETS_DEVICE", _p(env_str, "auto"), "`auto`",
                            "torch device: `auto`, `cpu`, `cuda`, `cuda:N`")
    hf_token: str | None = _variable("HF_TOKEN", _p(env_str), "none",
                                     "Hugging Face token for gated models (community-1); never shown", repr=False)
    model_cache: pathlib.Path = _variable("BATCH_ASSETS_MODEL_CACHE",
                                          _p(env_path, pathlib.Path.home() / ".cache" / "batch_assets" / "models"),
                                          "`~/.cache/batch_assets/models`", "where the builtin models are built")
    torch_threads: int = _variable("BATCH_ASSETS_TORCH_THREADS", _p(env_int, 0, 0, 1024), "0 (torch's default)",
                                   "torch CPU threads, 0–1024")
    word_confidence: bool = _variable("BATCH_ASSETS_WORD_CONFIDENCE", _p(env_bool, True), "true",
                                      "the words' `score` from the TDT decoder (2–3 % of ASR seconds on CPU); "
                                      "`false`: null")
    channels: str = _variable("BATCH_ASSETS_CHANNELS", _p(env_choice, "auto", ("auto", "mix", "separate")), "`auto`",
                              "how a multichannel unit is read: `auto` (a two-channel call channel by channel, one mix "
                              "mixed), `mix`, `separate` ([channels](docs/outputs.md#channels))")
    lock_dir: str = _variable("BATCH_ASSETS_LOCK_DIR", _p(env_str, DEFAULT_LOCK_DIR),
                              "`batch_assets-locks` in the system temp dir",
                              "per-device section locks, shared by all processes on a device")
    tmp_dir: str | None = _variable("BATCH_ASSETS_TMP_DIR", _p(env_str), "system temp",
                                    "where a GPU step stages each object it reads while it decodes it")
    backfill_partitions_per_run: int = _variable("BATCH_ASSETS_BACKFILL_PARTITIONS_PER_RUN", _p(env_int, 7, 1, 366),
                                                 "7", "partitions per backfill run (one model load each), 1–366")
    shrink_guard_fraction: float = _variable("BATCH_ASSETS_SHRINK_GUARD_FRACTION", _p(env_fraction, 0.5), "0.5",
                                             "refuse a manifest below this share (0–1) of the current one's units")
    degrade_guard_fraction: float = _variable(
        "BATCH_ASSETS_DEGRADE_GUARD_FRACTION", _p(env_fraction, 0.5), "0.5",
        "refuse results that leave more than this share (0–1) of the units with transcripts `fetch_failed`, "
        "`failed`, `changed_since_listed`, `undecodable` or `unsupported_language`")
    # 25 audio-hours: a GPU step's fixed cost (model imports and load, first-flight warm-up, CUDA-graph capture:
    # ~40 s on the H200) under 10 % of the step at 250 audio-h/GPU-h (docs/gpu-section.md: shards)
    shard_audio_seconds: int = _variable("BATCH_ASSETS_SHARD_AUDIO_SECONDS", _p(env_int, 90000, 60, 10**7), "90000",
                                         "most audio seconds per GPU step (shard), each channel's counted, 60–10^7")
    gpu_retry_delay_seconds: int = _variable(
        "BATCH_ASSETS_GPU_RETRY_DELAY_SECONDS", _p(env_int, 30, 0, 3600), "30",
        "seconds before a failed step of the GPU section (a shard, a leftover step, the assembly) is retried, in a "
        "fresh process or pod, 0–3600")
    gpu_step_cpu: int = _variable("BATCH_ASSETS_GPU_STEP_CPU", _p(env_int, 6, 1, 256), "6",
                                  "CPUs a GPU step's pod requests on Kubernetes (the section's host work and the "
                                  "decode of its flights), 1–256")
    gpu_step_memory_gib: int = _variable("BATCH_ASSETS_GPU_STEP_MEMORY_GIB", _p(env_int, 24, 1, 4096), "24", "GiB "
                                         "a GPU step's pod requests on Kubernetes (limit: 4/3 of it), 1–4096")
    partitions_start: str = _variable("BATCH_ASSETS_PARTITIONS_START", _p(env_day, "2026-01-01"), "2026-01-01",
                                      "the first partition (YYYY-MM-DD)")
    schedule_running: bool = _variable("BATCH_ASSETS_SCHEDULE_RUNNING", _p(env_bool, False), "false",
                                       "`true`: the daily schedule starts on")
    sensors_running: bool = _variable("BATCH_ASSETS_SENSORS_RUNNING", _p(env_bool, False), "false",
                                      "`true`: the late-audio, freshness and alert sensors start on "
                                      "([unwatched days](docs/operations.md#days-nobody-watches))")
    late_audio_days: int = _variable("BATCH_ASSETS_LATE_AUDIO_DAYS", _p(env_int, 7, 1, 366), "7",
                                     "the late-audio sensor watches the days published in this many last days, 1–366")
    late_audio_interval_seconds: int = _variable(
        "BATCH_ASSETS_LATE_AUDIO_INTERVAL_SECONDS", _p(env_int, 120, 5, 86400), "120",
        "seconds between the late-audio sensor's listings, 5–86400")
    freshness_deadline: str = _variable("BATCH_ASSETS_FRESHNESS_DEADLINE", _p(env_clock, "09:00"), "09:00",
                                        "yesterday's transcripts are due by this time, HH:MM UTC")
    alert_webhook_url: str | None = _variable("BATCH_ASSETS_ALERT_WEBHOOK_URL", _p(env_str), "none: nothing sent",
                                              "incoming webhook (Slack, Teams, …) the alerts are posted to as "
                                              "`{\"text\": …}`; never shown", repr=False)
    webserver_url: str | None = _variable("BATCH_ASSETS_WEBSERVER_URL", _p(env_str), "none",
                                          "the Dagster UI's address, for the run links in alerts")
    executor: str = _variable("BATCH_ASSETS_EXECUTOR", _p(env_choice, "multiprocess", ("k8s", "multiprocess")),
                              "`multiprocess`",
                              "`k8s`: one pod per step; `multiprocess`: a process per step, each forked from a "
                              "forkserver that imported the code location once per run")
    switch_defaults: Mapping[str, bool]  # each switch's deployment default (`switches.SWITCHES`), read-only
    set_variables: frozenset[str] = dataclasses.field(default=frozenset(), repr=False)  # those set, not empty
    padded_variables: frozenset[str] = dataclasses.field(default=frozenset(), repr=False)  # set, with spaces around

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Every setting parsed; a `SettingError` naming each variable that does not parse (one line each)."""
        environ = os.environ if environ is None else environ
        readers = {name: functools.partial(variable.read, environ) for name, variable in variables().items()}
        readers["switch_defaults"] = lambda: types.MappingProxyType(read_switch_defaults(environ))
        values = read_each(readers)
        stripped = {n: _raw(n, environ) for n in variable_names() | {s.env_var for s in SWITCHES}}
        set_ = {n: value for n, value in stripped.items() if value is not None}
        return cls(**values, set_variables=frozenset(set_),
                   padded_variables=frozenset(n for n, value in set_.items() if environ[n] != value))

    def resource_value(self, field: str) -> Any:
        """A resource field's source: `dg.EnvVar` of the first of its variables that is set, else the value read (the
        default; or the stripped value of a variable with spaces around it, which the `dg.EnvVar` would pass raw)."""
        name = next((n for n in variables()[field].names if n in self.set_variables), None)
        return dg.EnvVar(name) if name is not None and name not in self.padded_variables else getattr(self, field)


def variables() -> dict[str, Variable]:
    """Each `Settings` field read from one variable (or a list of them, the first set wins) -> how it is read."""
    return {f.name: f.metadata["variable"] for f in dataclasses.fields(Settings) if "variable" in f.metadata}


def variable_names() -> set[str]:
    """Every variable a `Settings` field is read from (the switches' aside)."""
    return {name for variable in variables().values() for name in variable.names}


@functools.cache
def current_settings() -> Settings:
    """This process's settings: read from the environment on first use, then kept."""
    return Settings.from_env()


def current_routing() -> dict[str, str]:
    """Language -> ASR model as this process's resources build it (`BATCH_ASSETS_ASR_MODELS`, its `en` entry replaced
    by `BATCH_ASSETS_ASR_MODEL` when set): what `batch-assets run --language` is checked against."""
    return with_english(current_settings().asr_models, current_settings().asr_model)


def reload_settings() -> Settings:
    """Read again (after `batch-assets run`'s flags set their variables)."""
    current_settings.cache_clear()
    return current_settings()


README_HEADER = "| variable | default | what it does |\n|---|---|---|"


def readme_table() -> str:
    """The README's table of our variables: the settings, then the switches."""
    rows = [v.readme_row() for v in variables().values()]
    rows += [f"| `{s.env_var}` | {str(s.default).lower()} | {s.description} "
             "([kill switches](docs/gpu-section.md#kill-switches)) |" for s in SWITCHES]
    return "\n".join([README_HEADER, *rows])


if __name__ == "__main__":
    print(readme_table())
