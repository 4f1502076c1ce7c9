"""The GPU section's run config: what the launchpad shows under `ops.gpu_section.config`, and each step's part.

The levers' fields come from the switch registry (`switches.py`); the speaker-count hints, the language, the channel
choice, the `units` of a rerun, the shard size, the lease wait, the degrade guard and speaker linking are set once
for the graph and mapped to its five ops (`gpu_section_config`).
"""

import dataclasses

import dagster as dg
import polars as pl
from pydantic import Field

from batch_assets.ingest.flights import DECODE_BUDGET_S
from batch_assets.ingest.speaker_hints import AppliedHints, HintError, SpeakerHints, unit_hints
from batch_assets.ingest.unit_channels import RUN_CONFIG, SETTING, ChannelChoiceError, UnitChannels, unit_channels
from batch_assets.ingest.unit_language import DeclaredLanguage, unit_language
from batch_assets.long_units.windows import LINK_THRESHOLD
from batch_assets.models.languages import AUTO, LanguageError, run_language
from batch_assets.orchestration.steps import DegradeConfig, lease_wait_field
from batch_assets.settings import current_routing, current_settings
from batch_assets.switches import SWITCHES

SHARD_AUDIO_SECONDS = current_settings().shard_audio_seconds


def _switch_field(name: str):
    """A lever's run config field: its default and description come from the registry (`switches.py`)."""
    switch = next(s for s in SWITCHES if s.name == name)
    return Field(default=current_settings().switch_defaults[name],
                 description=f"{switch.description} (env default {switch.env_var})")


class ResultSwitchConfig(dg.Config):
    """The switches that change results (kinds "numbers" and "approximate"): every step that judges a flight's
    commit reads them (`gpu/outputs/commit_identity.py`)."""

    half_precision_enabled: bool = _switch_field("half_precision_enabled")
    tf32_enabled: bool = _switch_field("tf32_enabled")
    embedding_trunk_blocks_enabled: bool = _switch_field("embedding_trunk_blocks_enabled")
    embedding_skip_covered_enabled: bool = _switch_field("embedding_skip_covered_enabled")
    channel_reading_enabled: bool = _switch_field("channel_reading_enabled")


class ExactLeverConfig(dg.Config):
    """The exact levers (kind "exact": they change no result)."""

    prepare_flight_enabled: bool = _switch_field("prepare_flight_enabled")
    vad_segmentation_reuse_enabled: bool = _switch_field("vad_segmentation_reuse_enabled")
    asr_cuda_graphs_enabled: bool = _switch_field("asr_cuda_graphs_enabled")
    embedding_shared_trunk_enabled: bool = _switch_field("embedding_shared_trunk_enabled")
    batch_across_units_enabled: bool = _switch_field("batch_across_units_enabled")
    host_overlap_enabled: bool = _switch_field("host_overlap_enabled")


class LeverConfig(ResultSwitchConfig, ExactLeverConfig):  # fields in the registry's order: the exact ones first
    """The speed levers, each a kill switch (`batch_assets/switches.py`; env defaults read at load)."""

    decode_budget_seconds: float = Field(default=DECODE_BUDGET_S,
                                         description="Most audio seconds prepared ahead (each channel's counted)")
    prepare_workers: int = Field(default=2, ge=1, description="Flights prepared concurrently (within the budget "
                                 "ahead; with prepare_flight_enabled)")
    fetch_workers: int = Field(default=8, ge=1, description="A flight's units read from storage concurrently (with "
                               "prepare_flight_enabled; off: one after another)")


class HintsConfig(dg.Config):
    """Speaker-count hints for every unit of the partition (a unit's sidecar wins: `ingest/speaker_hints.py`)."""

    num_speakers: int | None = Field(default=None, gt=0, description="Exactly this many speakers in every unit")
    min_speakers: int | None = Field(default=None, gt=0, description="At least this many speakers in every unit")
    max_speakers: int | None = Field(default=None, gt=0, description="At most this many speakers in every unit")


def run_hints(config: HintsConfig) -> SpeakerHints:
    """The run config's hints; a contradiction fails the step at once, naming the fields."""
    try:
        return SpeakerHints(config.num_speakers, config.min_speakers, config.max_speakers)
    except HintError as error:
        raise dg.Failure(f"speaker hints in the run config: {error} (ops.gpu_section.config)",
                         allow_retries=False) from None


def unit_speaker_hints(manifest: pl.DataFrame, hints: SpeakerHints) -> dict[str, AppliedHints]:
    """Each unit's hints and their source: its sidecar's (read into the manifest by `fetched_audio`), else the
    run's. Looked up once per step: the shard steps give them to diarization, the assembly to the stitching and
    to the units table's hint columns."""
    return {row["unit_id"]: unit_hints(hints, row) for row in manifest.iter_rows(named=True)}


class ChannelConfig(dg.Config):
    """How every unit without a sidecar choice reads its channels (`ingest/unit_channels.py`)."""

    channels: str | None = Field(default=None, description="auto (a two-channel call channel by channel, one mix "
                                 "mixed), mix or separate; null: the setting BATCH_ASSETS_CHANNELS")
    channel_speakers: list[str] = Field(default=[], description="Each channel's speaker, from channel 0 (default "
                                        "CHANNEL_0, CHANNEL_1, ...)")
    diarized_channels: list[int] = Field(default=[], description="Channels holding several parties (a conference "
                                         "bridge), diarized within the channel")


def run_channels(config: ChannelConfig) -> UnitChannels:
    """The run's channel choice; a bad one fails the step at once, naming the field."""
    try:
        mode = config.channels or current_settings().channels
        return UnitChannels(mode, SETTING if config.channels is None else RUN_CONFIG, tuple(config.channel_speakers),
                            tuple(config.diarized_channels))
    except ChannelChoiceError as error:
        raise dg.Failure(f"channels in the run config: {error} (ops.gpu_section.config)", allow_retries=False) from None


def unit_channel_choices(manifest: pl.DataFrame, config) -> dict[str, UnitChannels]:
    """Each unit's channel choice (its sidecar's over the run's; all mixed with `channel_reading_enabled` off)."""
    run = run_channels(config)
    return {row["unit_id"]: unit_channels(run, row, config.channel_reading_enabled)
            for row in manifest.iter_rows(named=True)}


def units_field():
    return Field(default=[], description="Rerun only these units of the partition (unit_id or relative key); the other "
                 "units keep their rows. Empty: the whole partition, replaced.")


class LanguageConfig(dg.Config):
    """The language of every unit without a sidecar `language` (`ingest/unit_language.py`)."""

    language: str = Field(default=AUTO, description="An ISO 639-1 code with an ASR model (BATCH_ASSETS_ASR_MODELS), "
                          "or 'auto': detect each unit's language from its speech")


def checked_run_language(config: LanguageConfig, routing: dict[str, str]) -> str | None:
    """The run's language (None: detect); a code without a model fails the step at once, naming the code and the
    configured languages (`fetched_audio` checks it before anything is fetched, the plan step before any GPU work,
    `batch-assets run` before the run)."""
    try:
        return run_language(config.language, routing, "ops.gpu_section.config.language")
    except LanguageError as error:
        raise dg.Failure(str(error), allow_retries=False) from None


def refuse_a_bad_run_language(run_config: dict) -> None:
    """At a run's first step (`fetched_audio`), before anything is fetched: this run's `gpu_section` language,
    checked against the deployment's routing (the settings the resources are built from). The plan step checks it
    again against the `gpu` resource's own."""
    language = run_config.get("ops", {}).get("gpu_section", {}).get("config", {}).get("language")
    if language is not None:
        checked_run_language(LanguageConfig(language=language), current_routing())


def unit_languages(manifest: pl.DataFrame, run: str | None) -> dict[str, DeclaredLanguage]:
    """Each unit's declared language (sidecar, else the run's) or DETECT: looked up once per step, like the hints."""
    return {row["unit_id"]: unit_language(run, row) for row in manifest.iter_rows(named=True)}


def unit_inputs(manifest: pl.DataFrame, config, routing: dict[str, str]) -> dict[str, list]:
    """What the run config gives each unit that its results depend on: its speaker hints' values, its declared
    language (code, source, error) and its channel choice. Part of its flight's fingerprint (`gpu/steps/resume.py`):
    a re-execution with other hints, another language or other channel choices (of a unit with several channels)
    redoes the flights whose units they change, and only those."""
    hints = unit_speaker_hints(manifest, run_hints(config))
    languages = unit_languages(manifest, checked_run_language(config, routing))
    channels, several = unit_channel_choices(manifest, config), _multichannel(manifest)
    return {uid: [list(dataclasses.astuple(hints[uid].hints)), list(dataclasses.astuple(languages[uid]))]
            + ([list(dataclasses.astuple(channels[uid]))] if uid in several else []) for uid in hints}


def _multichannel(manifest: pl.DataFrame) -> set[str]:
    """The units whose channel choice can change their results: more than one channel (or a count not listed)."""
    if "channels" not in manifest.columns:
        return set(manifest["unit_id"])
    return set(manifest.filter(pl.col("channels").fill_null(2) != 1)["unit_id"])


class LeaseConfig(dg.Config):
    lease_wait_seconds: float = lease_wait_field()


class ShardConfig(LeverConfig, HintsConfig, LanguageConfig, ChannelConfig, LeaseConfig):
    """A shard or leftover step's config: the levers, the run's speaker hints, language and channel choice, the lease
    wait."""


class LinkConfig(dg.Config):
    speaker_link_threshold: float = Field(
        default=LINK_THRESHOLD, gt=0,
        description="A windowed unit's speakers closer than this across windows (euclidean, normalised centroids) "
        "are one voice (`batch_assets/long_units/windows.py`)")


class AssembleConfig(ResultSwitchConfig, HintsConfig, LanguageConfig, ChannelConfig, DegradeConfig, LinkConfig,
                     LeaseConfig):
    """The assembly's config: the result-changing switches, hints and language (which commits it may assemble; the
    hints also give the units table's hint columns and the stitching), the `units` of a rerun, the degrade guard,
    speaker linking, the lease wait."""

    units: list[str] = units_field()


class ListConfig(ResultSwitchConfig, HintsConfig, LanguageConfig, ChannelConfig):
    """The leftover listing's config: the result-changing switches, hints and language (which commits are valid),
    the `units` of a rerun and the shard size (leftovers grouped by shard)."""

    units: list[str] = units_field()
    shard_audio_seconds: float = Field(
        default=SHARD_AUDIO_SECONDS, gt=0,
        description="Most audio seconds per GPU step (shard), each channel's counted for a unit with several; env "
                    "default BATCH_ASSETS_SHARD_AUDIO_SECONDS (90000)",
    )


class PlanConfig(ListConfig, LeaseConfig):
    """The plan step's config: it checks the hints and the language before any GPU work."""


class GpuSectionConfig(LeverConfig, PlanConfig, DegradeConfig, LinkConfig):
    """The GPU work's run config, as the launchpad shows it under `ops.gpu_section.config`:

    ```yaml
    ops:
      gpu_section:
        config:
          prepare_flight_enabled: true
          vad_segmentation_reuse_enabled: true
          asr_cuda_graphs_enabled: true
          embedding_shared_trunk_enabled: true
          batch_across_units_enabled: true
          host_overlap_enabled: true
          half_precision_enabled: false     # changes numbers: on only where the gate passes
          tf32_enabled: false               # changes numbers: on only where the gate passes
          embedding_trunk_blocks_enabled: false   # approximate: on only where the approximate gate passes
          embedding_skip_covered_enabled: false   # approximate: on only where the approximate gate passes
          channel_reading_enabled: true     # off: every unit mixed down and diarized
          shard_audio_seconds: 90000        # one GPU step per 25 audio-hours
          units: []                         # or ["calls/2026/support_call.flac"]: rerun only these
          allow_degrade: false              # true: publish even if most transcribed units would become failed
          num_speakers: null                # or min_speakers / max_speakers: hints for every unit without a sidecar
          language: auto                    # or an ISO 639-1 code: every unit without a sidecar language
          channels: null                    # auto, mix or separate (null: BATCH_ASSETS_CHANNELS, default auto)
          channel_speakers: []              # or ["agent", "caller"]: channel 0's speaker, channel 1's
          diarized_channels: []             # or [1]: channel 1 holds several parties, diarized within it
          speaker_link_threshold: 0.7       # a windowed unit's speakers this close across windows are one voice
    ```
    """


@dg.config_mapping
def gpu_section_config(config: GpuSectionConfig) -> dict:
    values = config.model_dump()
    pick = lambda cls: {k: values[k] for k in cls.model_fields}  # noqa: E731
    return {"plan_gpu_shards": {"config": pick(PlanConfig)}, "gpu_shard": {"config": pick(ShardConfig)},
            "list_leftover_flights": {"config": pick(ListConfig)}, "gpu_leftover": {"config": pick(ShardConfig)},
            "assemble_gpu_tables": {"config": pick(AssembleConfig)}}
