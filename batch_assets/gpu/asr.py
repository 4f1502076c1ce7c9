"""ASR with NeMo TDT on the speech of a flight's units, batched, with word timestamps.

Speech regions from VAD are merged across short pauses, padded a little, and cut into segments of at
most `max_segment_s`, so that one long unit never becomes one huge encoder input; all segments of a
flight are transcribed in batches, and word times are shifted back to unit time.

Decoder mode (lever 3): the CUDA-graph setting is applied through the decoding config
(`change_decoding_strategy`), because NeMo rebuilds its decoder from `cfg.decoding` on some calls
(a timestamps request does), which would silently undo a runtime toggle. `actual_decoder_mode` reports
what will really run: graphs only run for CUDA tensors, whatever the decoder's attribute says on CPU.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

SAMPLE_RATE = 16_000


@dataclasses.dataclass(frozen=True)
class Segment:
    unit_id: str
    start_s: float
    end_s: float


@dataclasses.dataclass(frozen=True)
class Word:
    unit_id: str
    start_s: float
    end_s: float
    word: str


def speech_segments(
    unit_id: str,
    regions: list[tuple[float, float]],
    duration_s: float,
    merge_gap_s: float = 0.5,
    pad_s: float = 0.15,
    max_segment_s: float = 30.0,
) -> list[Segment]:
    merged: list[list[float]] = []
    for start, end in sorted(regions):
        start, end = max(0.0, start - pad_s), min(duration_s, end + pad_s)
        if merged and start - merged[-1][1] <= merge_gap_s and end - merged[-1][0] <= max_segment_s:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    segments = []
    for start, end in merged:
        pieces = max(1, int(np.ceil((end - start) / max_segment_s)))
        edges = np.linspace(start, end, pieces + 1)
        segments.extend(Segment(unit_id, float(a), float(b)) for a, b in zip(edges[:-1], edges[1:], strict=True))
    return segments


class DecoderModeError(RuntimeError):
    """The decoder is not in the mode the run asked for."""


def set_cuda_graphs(model, enabled: bool) -> None:
    from omegaconf import open_dict

    decoding = copy.deepcopy(model.cfg.decoding)
    with open_dict(decoding):
        decoding.greedy.use_cuda_graph_decoder = enabled
    model.change_decoding_strategy(decoding, verbose=False)


def actual_decoder_mode(model, device) -> str:
    """What greedy decoding will really do: 'cuda_graphs:<mode>' or 'eager' (torch loop)."""
    requested = bool(model.cfg.decoding.greedy.get("use_cuda_graph_decoder", False))
    computer = getattr(getattr(model.decoding, "decoding", None), "decoding_computer", None)
    mode = getattr(computer, "cuda_graphs_mode", None) if computer is not None else None
    if not requested or mode is None or str(getattr(device, "type", device)) != "cuda":
        return "eager"
    return f"cuda_graphs:{getattr(mode, 'value', mode)}"


def expected_decoder_mode(enabled: bool, device) -> str:
    if enabled and str(getattr(device, "type", device)) == "cuda":
        return "cuda_graphs"
    return "eager"


def check_decoder_mode(model, device, enabled: bool, when: str) -> str:
    actual = actual_decoder_mode(model, device)
    expected = expected_decoder_mode(enabled, device)
    if not actual.startswith(expected):
        raise DecoderModeError(f"decoder mode {when} ASR call: expected {expected!r}, actual {actual!r}")
    return actual


def transcribe_segments(model, audio: dict[str, np.ndarray], segments: list[Segment], batch_size: int) -> list[Word]:
    if not segments:
        return []
    pieces = [
        audio[s.unit_id][int(round(s.start_s * SAMPLE_RATE)) : int(round(s.end_s * SAMPLE_RATE))] for s in segments
    ]
    hypotheses = model.transcribe(pieces, batch_size=batch_size, timestamps=True, verbose=False)
    if isinstance(hypotheses, tuple):  # some NeMo versions return (best, all)
        hypotheses = hypotheses[0]
    words: list[Word] = []
    for segment, hypothesis in zip(segments, hypotheses, strict=True):
        for entry in (hypothesis.timestamp or {}).get("word", []):
            text = str(entry["word"]).strip()
            if not text:
                continue
            start = min(segment.end_s, segment.start_s + float(entry["start"]))
            end = min(segment.end_s, max(start, segment.start_s + float(entry["end"])))
            words.append(Word(segment.unit_id, round(start, 3), round(end, 3), text))
    return words
