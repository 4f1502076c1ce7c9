"""The speed levers as kill switches, in one registry.

Four kinds (`Switch.kind`). The exact levers are on by default: they change no result (the gate and the tests
hold them to it). `half_precision_enabled` and `tf32_enabled` change numbers (reduced precision), so they are off
unless a deployment turns them on after the gate passes on its own audio. The approximate levers
(`embedding_trunk_blocks_enabled`, `embedding_skip_covered_enabled`) change results by design, within the bounds
of the gate for approximate levers (`gate/compare.py`, against the exact run of the same audio): off unless that
gate passes on a deployment's audio. A path switch (`channel_reading_enabled`) turns a way of reading the audio off:
on by default, it changes results by design (the gate compares runs with it at one value).
A default can be flipped for a whole deployment with an environment
variable, read once when the code location loads (`Settings.switch_defaults` in `settings.py`, so every
run launched from that location agrees),
and each run can still override it in run config from the launchpad. A value other than
"true"/"false" stops the code location from loading with an error naming the variable: a typo in a
deployment must never silently turn a lever on or off.

`SWITCHES` is the one place a switch is declared: the run config fields (`gpu/steps/run_config.py: LeverConfig`),
the Helm values' env entries (`k8s/values.yaml`) and the table in docs/gpu-section.md are made from it, and
`tests/test_switches_registry.py` fails when any of them, or the typed core's `Levers`, disagrees. To add a
lever: add a `Switch` here; a field to `ExactLeverConfig`, or for kinds "numbers" and "approximate" to
`ResultSwitchConfig` for kinds "numbers", "approximate" and "path" (`gpu/steps/run_config.py`: what a flight's
commit records), and to `Levers`
(`gpu/section/levers.py`), in the registry's order; the switch at its default in `GpuSectionConfig`'s YAML example;
then paste `python -m batch_assets.switches` output into the values and docs/gpu-section.md, and `python -m
batch_assets.settings` output into the README's configuration table.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Switch:
    name: str  # the run config field (`ops.gpu_section.config.<name>`) and the `Levers` field
    env_var: str  # the deployment default, read once at code-location load
    description: str  # shown in the launchpad, docs/gpu-section.md, the README and the Helm values
    default: bool = True  # when the variable is unset or empty
    helm_value: str = "true"  # what the Helm values set the variable to
    kind: str = "exact"  # "exact": changes no result; "numbers": reduced precision; "approximate": see above

    def helm_env(self) -> list[str]:
        return [f"        # {self.description}", f"        - name: {self.env_var}",
                f'          value: "{self.helm_value}"']

    def readme_row(self) -> str:
        return f"| `{self.name}` | `{self.env_var}` | {self.description} |"


SWITCHES: tuple[Switch, ...] = (
    Switch("prepare_flight_enabled", "BATCH_PIPELINE_PREPARE_FLIGHT_ENABLED",
           "next flights' audio fetched and decoded from the source in the background, each flight's units "
           "concurrently, at most the decode budget (1800 s) ahead; off: fetched and decoded in the section, one unit "
           "after another"),
    Switch("vad_segmentation_reuse_enabled", "BATCH_PIPELINE_VAD_SEGMENTATION_REUSE_ENABLED",
           "diarization reuses VAD's segmentation scores (one segmentation forward, not two)"),
    Switch("asr_cuda_graphs_enabled", "BATCH_PIPELINE_ASR_CUDA_GRAPHS_ENABLED",
           "NeMo TDT greedy decoding with CUDA graphs (eager on CPU, recorded)"),
    Switch("embedding_shared_trunk_enabled", "BATCH_PIPELINE_EMBEDDING_SHARED_TRUNK_ENABLED",
           "one embedding-trunk forward per chunk shared by its local speakers; pooling only for active ones"),
    Switch("batch_across_units_enabled", "BATCH_PIPELINE_BATCH_ACROSS_UNITS_ENABLED",
           "segmentation and embedding-trunk forwards batched across the units of a flight, split back per unit"),
    Switch("host_overlap_enabled", "BATCH_PIPELINE_HOST_OVERLAP_ENABLED",
           "host work (clustering, attribution, tables) outside the device lock, overlapped with the next flight's "
           "device work"),
    Switch("half_precision_enabled", "BATCH_PIPELINE_HALF_PRECISION_ENABLED",
           "reduced precision (autocast) for the ASR encoder and the embedding trunk; changes numbers: off unless the "
           "gate passes",
           default=False, helm_value="false", kind="numbers"),
    Switch("tf32_enabled", "BATCH_PIPELINE_TF32_ENABLED",
           "TF32 matmuls and convolutions for the ASR and language-identification models on CUDA (pyannote's stay "
           "full float32; nothing on CPU); changes numbers: off unless the gate passes",
           default=False, helm_value="false", kind="numbers"),
    Switch("embedding_trunk_blocks_enabled", "BATCH_PIPELINE_EMBEDDING_TRUNK_BLOCKS_ENABLED",
           "APPROXIMATE: the embedding trunk once over each second of a unit (blocks of up to 60 s), every chunk's "
           "speakers pooled from those frames, not one trunk pass per overlapping chunk; off unless the approximate "
           "gate passes",
           default=False, helm_value="false", kind="approximate"),
    Switch("embedding_skip_covered_enabled", "BATCH_PIPELINE_EMBEDDING_SKIP_COVERED_ENABLED",
           "APPROXIMATE: a chunk speaker covered by a neighbour chunk's same speaker takes its embedding instead of "
           "being embedded; off unless the approximate gate passes",
           default=False, helm_value="false", kind="approximate"),
    Switch("channel_reading_enabled", "BATCH_PIPELINE_CHANNEL_READING_ENABLED",
           "PATH: a multichannel unit read as its `channels` mode says (auto: a two-channel call channel by channel, "
           "each party its channel's speaker, not diarized); off: every unit mixed down to one signal and diarized",
           kind="path"),
)
SWITCH_ENV_VARS: dict[str, str] = {s.name: s.env_var for s in SWITCHES}
EXACT_SWITCHES = tuple(s.name for s in SWITCHES if s.kind == "exact")
APPROXIMATE_SWITCHES = tuple(s.name for s in SWITCHES if s.kind == "approximate")
NUMBERS_SWITCHES = tuple(s.name for s in SWITCHES if s.kind == "numbers")
README_HEADER = ("| run config (`ops.gpu_section.config`) | env default (read once at code-location load) | lever |\n"
                 "|---|---|---|")


def readme_table() -> str:
    return "\n".join([README_HEADER, *(s.readme_row() for s in SWITCHES)])


def helm_env() -> str:
    return "\n".join(line for s in SWITCHES for line in s.helm_env())


if __name__ == "__main__":
    print(readme_table(), helm_env(), sep="\n\n")
