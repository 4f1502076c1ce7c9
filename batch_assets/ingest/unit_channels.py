"""How each unit's channels are to be read: its sidecar's choice, else the run's, else the deployment's. No Dagster.

The mode (`source/channels.py`: `auto`, `mix`, `separate`) comes from a JSON sidecar beside the object
(`call.wav.json`: `{"channels": "separate", "channel_speakers": ["agent", "caller"], "diarized_channels": [1]}`,
read into the manifest's `sidecar_channels` by `fetched_audio`), else the run config (`ops.gpu_section.config.channels`;
`batch-assets run --channels MODE`), else the setting `BATCH_ASSETS_CHANNELS` (default `auto`). `channel_speakers`
names each channel's speaker (else `CHANNEL_0`, `CHANNEL_1`, ...); `diarized_channels` lists the channels that hold
several parties (a conference bridge), diarized within their channel. A sidecar's bad channel keys are ignored (the
run's choice applies) and the unit's reason says why, as for bad speaker hints. The kill switch
`channel_reading_enabled` off mixes every unit down.
"""

from __future__ import annotations

import dataclasses
import json
import re

from batch_assets.source.channels import AUTO, MIX, MODES

CHANNEL_KEYS = ("channels", "channel_speakers", "diarized_channels")  # a sidecar's keys for them
SIDECAR, RUN_CONFIG, SETTING, SWITCH_OFF = "sidecar", "run_config", "setting", "switch_off"
MAX_CHANNELS = 32


class ChannelChoiceError(ValueError):
    """Channel choices that cannot be used; the message names the key and why."""


@dataclasses.dataclass(frozen=True)
class UnitChannels:
    """How a unit's channels are read (`mode`, from `source`), each channel's speaker, the channels diarized."""

    mode: str = AUTO
    source: str = SETTING
    speakers: tuple[str, ...] = ()
    diarized: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ChannelChoiceError(f"channels must be one of {', '.join(MODES)}, not {self.mode!r}")
        if not all(isinstance(s, str) and s.strip() and len(s) <= 100 for s in self.speakers):
            raise ChannelChoiceError(f"channel_speakers must be names (1-100 characters), not {list(self.speakers)!r}")
        if len(set(self.speakers)) != len(self.speakers) or len(self.speakers) > MAX_CHANNELS:
            raise ChannelChoiceError(f"channel_speakers must be distinct, at most {MAX_CHANNELS}: "
                                     f"{list(self.speakers)!r}")
        taken = [s for i, s in enumerate(self.speakers) if re.fullmatch(r"CHANNEL_\d+", s) and s != f"CHANNEL_{i}"]
        if taken:
            raise ChannelChoiceError(f"channel_speakers {taken!r}: CHANNEL_N names channel N (give another name)")
        if not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < MAX_CHANNELS for c in self.diarized):
            raise ChannelChoiceError(f"diarized_channels must be channel numbers from 0, not {list(self.diarized)!r}")

    def speaker(self, channel: int) -> str:
        return self.speakers[channel] if channel < len(self.speakers) else f"CHANNEL_{channel}"

    def off(self) -> UnitChannels:
        """Mixed down by the kill switch."""
        return dataclasses.replace(self, mode=MIX, source=SWITCH_OFF)


MIXED_DOWN = UnitChannels(MIX)


def sidecar_channels(value: dict, name: str) -> str | None:
    """A sidecar's channel keys, checked, as the manifest keeps them (JSON), or None: it has none.
    `ChannelChoiceError` naming the sidecar when they cannot be used."""
    chosen = {key: value[key] for key in CHANNEL_KEYS if key in value}
    if not chosen:
        return None
    try:
        _choice(chosen, SIDECAR, UnitChannels())
    except (ChannelChoiceError, TypeError) as error:
        raise ChannelChoiceError(f"{name}: {error}") from None
    return json.dumps(chosen, sort_keys=True)


def _choice(chosen: dict, source: str, run: UnitChannels) -> UnitChannels:
    speakers, diarized = chosen.get("channel_speakers", run.speakers), chosen.get("diarized_channels", run.diarized)
    if not isinstance(speakers, list | tuple) or not isinstance(diarized, list | tuple):
        raise ChannelChoiceError("channel_speakers and diarized_channels must be lists")
    mode = chosen.get("channels")
    return UnitChannels(run.mode if mode is None else mode, run.source if mode is None else source, tuple(speakers),
                        tuple(diarized))


def unit_channels(run: UnitChannels, manifest_row: dict, enabled: bool = True) -> UnitChannels:
    """The unit's choice: its sidecar's keys (checked by `fetched_audio`) over the run's; `enabled`: the kill switch."""
    stored = manifest_row.get("sidecar_channels")
    unit = run if stored is None else _choice(json.loads(stored), SIDECAR, run)
    return unit if enabled else unit.off()
