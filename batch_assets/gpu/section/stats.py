"""What the GPU section counts as it works: each stage's seconds, split into device and host work, and its forwards.

One `SectionStats` per section run (`runner.SectionReport.stats`), added to from the device work and, with lever 6,
from the host-work thread (`HOST_THREAD`), whose host seconds are counted as off the device work's path.
"""

from __future__ import annotations

import collections
import dataclasses
import threading

# model_load: ASR and language identification models loaded when a flight first needs them
STAGES = ("vad", "language_id", "diarization", "asr", "attribution", "tables", "model_load")
HOST_THREAD = "section-host"  # lever 6's thread (`runner.HostWork`)


@dataclasses.dataclass
class SectionStats:
    # per stage (`STAGES`): seconds in model forwards (device work) and the rest (host work: score aggregation,
    # clustering, reconstruction, attribution, table building and writing); "tables" is the commit's
    device_seconds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    host_seconds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    decoder_modes: set = dataclasses.field(default_factory=set)
    segmentation_reuse: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # segmentation model forwards: by VAD (all units, and units that went on to diarization), by diarization
    segmentation_forwards: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    # embedding work summed over diarized units (`EmbeddingWork.counts`: chunks, pairs, active_pairs, trunk_forwards,
    # pooled_pairs, trunk_seconds, copied_pairs)
    embedding_work: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    embedding_paths: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    asr_model_loads: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # in this section
    asr_model_load_seconds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    asr_seconds_by_model: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # ASR calls
    languages: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # units with speech
    asr_batch_retries: int = 0  # flights whose batched ASR failed and were retried unit by unit
    # flights with no speech to transcribe: no ASR call ran, so there is no decoder to check (NeMo builds and
    # captures its CUDA graphs lazily, on the first decode: demanding a captured graph would fail them)
    decoder_checks_skipped: int = 0
    batch_fallbacks: int = 0  # lever 5's batched forwards failed for a flight and were redone unit by unit
    # seconds the host phase spent in model forwards: 0 unless a precomputed forward did not match what the call
    # needed (then the call ran it itself, outside the section with lever 6); the tests assert 0
    host_phase_device_s: float = 0.0
    # per stage: host seconds run on lever 6's thread, off the device work's path
    overlapped_host_seconds: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def seconds(self) -> collections.Counter:
        """Per stage, device and host work together."""
        return self.device_seconds + self.host_seconds

    @property
    def overlapped_host_s(self) -> float:
        return sum(self.overlapped_host_seconds.values())

    @property
    def host_in_section_s(self) -> float:
        """Host seconds on the device work's path (all of them without lever 6)."""
        return sum(self.host_seconds.values()) - self.overlapped_host_s

    def stage_seconds(self) -> dict[str, dict[str, float]]:
        """Per stage: device seconds, host seconds, and of those the host seconds on the device work's path."""
        return {stage: {"device": round(self.device_seconds[stage], 3), "host": round(self.host_seconds[stage], 3),
                        "host_in_section": round(self.host_seconds[stage] - self.overlapped_host_seconds[stage], 3)}
                for stage in STAGES}

    def add(self, stage: str, device_s: float, host_s: float) -> None:
        with self._lock:  # lever 6: the device work and the host work add from two threads
            self._add(stage, device_s, host_s)

    def _add(self, stage: str, device_s: float, host_s: float) -> None:
        if threading.current_thread().name.startswith(HOST_THREAD):
            self.overlapped_host_seconds[stage] += host_s
        self.device_seconds[stage] += device_s
        self.host_seconds[stage] += host_s
