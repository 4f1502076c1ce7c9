"""ASR with NeMo TDT on the speech of a flight's units, batched, with word timestamps.

Speech regions from VAD are merged across short pauses, padded a little, and cut into segments of at
most `max_segment_s`, so that one long unit never becomes one huge encoder input; all segments of a
flight are transcribed in batches (`batch_size_for`: a flight's segments in one or two forwards on a GPU, 8 on a
CPU), longest first so that each batch pads little, and word times are shifted back to unit time.

Word confidence: the decoding config also asks the TDT decoder for each word's confidence (`max_prob`,
the emitted tokens' probabilities, the word's lowest), which becomes the words table's `score`. It leaves
the words and times as they are; it costs 2-3 % of ASR seconds on CPU (`benchmarks/word_confidence.py`), so it
is a setting (`BATCH_ASSETS_WORD_CONFIDENCE`, the gpu resource's `word_confidence`): off, `score` is null.

Decoder mode (lever 3): the CUDA-graph setting is applied through the decoding config
(`change_decoding_strategy`), because NeMo rebuilds its decoder from `cfg.decoding` on some calls
(a timestamps request does), which would silently undo a runtime toggle. `check_decoder_mode` asserts
what will really run: graphs only run for CUDA tensors, whatever the decoder's attribute says on CPU. A hybrid
TDT-CTC model (`EncDecHybridRNNTCTCBPEModel`, parakeet-tdt_ctc-0.6b-ja) decodes with its transducer (TDT) head,
chosen in the same call and asserted with the rest: its CTC head never runs here.

Batch invariance: a unit's words do not depend on what shares its batches. NeMo masks the padding from the STFT
through the encoder; the per-feature normalization, the TDT decoder's token durations and its state's row count are
made the batch's no longer (`gpu/adapters/nemo_adapter.py`, `tests/test_batch_invariance.py`). What is left is the
encoder's float arithmetic for another batch shape: 1 score of 586 moved in its fourth decimal on a CPU flight, no
word, start or end (`benchmarks/asr_batches.py`); bitwise would take one shape for every forward (15 %+ on a CPU).

Words of a language written without spaces (`languages.UNSPACED`: Japanese): NeMo's word timestamps split the text
at spaces, so such a segment would be one "word"; its words are the model's tokens instead (NeMo's per-token
timestamps, each token's confidence as its score), which the transcript joins with nothing between them. A space
the model emitted inside a segment (a Latin-script name in a Japanese call, "Apple Music"; the phrase spaces of Thai,
Lao, Khmer and Burmese) stays at the start of the token after it (" Music"), so the joined text keeps it.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np

from batch_assets.gpu.adapters.nemo_adapter import decoder_rows, install_batch_invariance

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
    score: float | None = None  # the TDT decoder's word confidence (0..1), when asked for


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
    """The decoder is not in the mode the run asked for: the worker must be quarantined."""


GRAPH_MODES = ("full_graph", "no_while_loops")


@dataclasses.dataclass(frozen=True)
class DecoderObservation:
    """What the decoder really is, read from the model, its decoding config and its decoding computer."""

    strategy: str
    head: str  # "transducer", or "ctc" for a hybrid model's CTC head (`decoder_head`)
    config_graphs: bool  # cfg.decoding.greedy.use_cuda_graph_decoder
    computer_mode: str | None  # the label-looping computer's cuda_graphs_mode
    captured: bool  # a CUDA graph (full or per-loop) has been captured
    device: str

    def describe(self) -> str:
        return (f"strategy={self.strategy} head={self.head} use_cuda_graph_decoder={self.config_graphs} "
                f"cuda_graphs_mode={self.computer_mode} graphs_captured={self.captured} device={self.device}")


def decoder_head(model) -> str:
    """The head `transcribe` decodes with: a hybrid TDT-CTC model's `cur_decoder` ("rnnt" or "ctc"); a transducer
    model has only its transducer."""
    return "ctc" if getattr(model, "cur_decoder", "rnnt") == "ctc" else "transducer"


def observe_decoder(model, device) -> DecoderObservation:
    decoding = model.cfg.decoding
    computer = getattr(getattr(model.decoding, "decoding", None), "decoding_computer", None)
    mode = getattr(computer, "cuda_graphs_mode", None) if computer is not None else None
    captured = computer is not None and (
        getattr(computer, "full_graph", None) is not None or getattr(computer, "separate_graphs", None) is not None
    )
    return DecoderObservation(
        strategy=str(decoding.get("strategy")),
        head=decoder_head(model),
        config_graphs=bool(decoding.greedy.get("use_cuda_graph_decoder", False)),
        computer_mode=None if mode is None else str(getattr(mode, "value", mode)),
        captured=captured,
        device=str(getattr(device, "type", device)),
    )


def graph_settings(model) -> dict:
    """The decoding settings the section applies and checks: strategy, CUDA graphs, and the word confidence's."""
    decoding = model.cfg.decoding
    confidence = decoding.get("confidence_cfg") or {}
    method = (confidence.get("method_cfg") or {}).get("name")
    return {"strategy": str(decoding.get("strategy")), "head": decoder_head(model),
            "use_cuda_graph_decoder": bool(decoding.greedy.get("use_cuda_graph_decoder", False)),
            "word_confidence": bool(confidence.get("preserve_word_confidence", False)),
            "confidence": f"{method}/{confidence.get('aggregation')}/exclude_blank={confidence.get('exclude_blank')}/"
                          f"tdt_include_duration={confidence.get('tdt_include_duration')}"}


# NeMo's ConfidenceConfig: blank frames excluded (the label-looping computer's fast path), tokens' max_prob, a word's
# lowest
WORD_CONFIDENCE = {"preserve_word_confidence": True, "exclude_blank": True, "aggregation": "min",
                   "tdt_include_duration": False, "method_cfg": {"name": "max_prob", "alpha": 1.0}}
CONFIDENCE_SETTING = "max_prob/min/exclude_blank=True/tdt_include_duration=False"  # WORD_CONFIDENCE as graph_settings
# reads it


def set_cuda_graphs(model, enabled: bool, word_confidence: bool = True) -> None:
    """Through the decoding config (which NeMo rebuilds from), never a runtime toggle it would undo; word
    confidence on or off in the same config; a hybrid model's transducer head chosen by the same call."""
    from omegaconf import open_dict

    decoding = copy.deepcopy(model.cfg.decoding)
    with open_dict(decoding):
        decoding.strategy = "greedy_batch"
        decoding.greedy.use_cuda_graph_decoder = enabled
        decoding.confidence_cfg = WORD_CONFIDENCE | {"preserve_word_confidence": word_confidence}
    head = {"decoder_type": "rnnt"} if hasattr(model, "cur_decoder") else {}  # a hybrid TDT-CTC model
    model.change_decoding_strategy(decoding, verbose=False, **head)


def apply_decoder_mode(model, enabled: bool, applied: dict | None, word_confidence: bool = True) -> dict:
    """Put the decoder in the requested mode; refuse if its settings changed since we last applied them.

    `applied` is what this process set last time (None on first use). Settings that differ from it were
    changed behind the section's back (e.g. by another `change_decoding_strategy` call), so this worker's
    results can no longer be trusted to match the baseline.
    """
    current = graph_settings(model)
    if applied is not None and current != applied:
        raise DecoderModeError(
            f"decoding settings changed behind the section's back: expected {applied}, actual {current}"
        )
    if current != {"strategy": "greedy_batch", "head": "transducer", "use_cuda_graph_decoder": enabled,
                   "word_confidence": word_confidence, "confidence": CONFIDENCE_SETTING}:
        set_cuda_graphs(model, enabled, word_confidence)
    return graph_settings(model)


def expected_decoder_mode(enabled: bool, device) -> str:
    if not enabled:
        return "eager"
    return "cuda_graphs" if str(getattr(device, "type", device)) == "cuda" else "eager (cuda graphs unavailable on cpu)"


def check_decoder_mode(model, device, enabled: bool, when: str) -> str:
    """Assert the decoder is in the requested mode before/after an ASR call; returns the mode that runs.

    Graphs on, on CUDA: the config asks for graphs, the computer is in a graphs mode, and after the call a
    graph has been captured. Graphs on, on CPU: graphs never run for CPU tensors whatever the computer's
    attribute says, so the mode is eager (recorded, not an error). Graphs off: no graphs mode anywhere.
    """
    seen = observe_decoder(model, device)
    expected = expected_decoder_mode(enabled, device)
    problems = []
    if seen.strategy != "greedy_batch":
        problems.append(f"strategy is {seen.strategy}, not greedy_batch")
    if seen.head != "transducer":
        problems.append(f"the {seen.head} head decodes, not the transducer (TDT) head")
    if seen.config_graphs != enabled:
        problems.append(f"use_cuda_graph_decoder is {seen.config_graphs}, run asked for {enabled}")
    if enabled and seen.device == "cuda":
        if seen.computer_mode not in GRAPH_MODES:
            problems.append(f"cuda_graphs_mode is {seen.computer_mode}")
        if when == "after" and not seen.captured:
            problems.append("no CUDA graph was captured by the call")
        actual = f"cuda_graphs:{seen.computer_mode}"
    elif not enabled:
        if seen.computer_mode is not None:
            problems.append(f"cuda_graphs_mode is {seen.computer_mode} although graphs are off")
        actual = "eager"
    else:
        actual = expected
    if problems:
        raise DecoderModeError(
            f"decoder mode {when} ASR call: expected {expected!r}, actual {seen.describe()} ({'; '.join(problems)})"
        )
    return actual


BATCH_SIZES = {"cuda": 128, "cpu": 8}  # measured: docs/gpu-section.md, per-flight processing


def batch_size_for(device, configured: int = 0) -> int:
    """ASR segments per forward: `configured`, or for 0 the device's. A GPU wants a flight's segments in one or two
    forwards (128, the size NeMo's published speeds use); a CPU pays each forward's padded length, so smaller
    batches of like lengths are faster there (8: 1.4 s against 2.7 s at 128 for 22 segments of 3-30 s)."""
    return configured or BATCH_SIZES.get(str(getattr(device, "type", device)), 16)


def transcribe_segments(model, audio: dict[str, np.ndarray], segments: list[Segment], batch_size: int,
                        token_units: frozenset[str] = frozenset()) -> list[Word]:
    """Each segment's words in unit time; a unit of `token_units` (a language written without spaces) gets its
    tokens as words."""
    if not segments:
        return []
    pieces = [
        audio[s.unit_id][int(round(s.start_s * SAMPLE_RATE)) : int(round(s.end_s * SAMPLE_RATE))] for s in segments
    ]
    install_batch_invariance()  # a segment's words its own, whatever shares its batch (nemo_adapter.py)
    decoder_rows(batch_size)
    # longest first (ties in flight order), as NeMo's transcribe_speech.py sorts its files: each batch pads to
    # segments of about its own length, not to the flight's longest
    order = sorted(range(len(pieces)), key=lambda i: -len(pieces[i]))
    hypotheses = model.transcribe([pieces[i] for i in order], batch_size=batch_size, timestamps=True, verbose=False)
    if isinstance(hypotheses, tuple):  # some NeMo versions return (best, all)
        hypotheses = hypotheses[0]
    by_segment = dict(zip(order, hypotheses, strict=True))
    hypotheses = [by_segment[i] for i in range(len(pieces))]
    words: list[Word] = []
    for segment, hypothesis in zip(segments, hypotheses, strict=True):
        tokens = segment.unit_id in token_units
        entries = (hypothesis.timestamp or {}).get("char" if tokens else "word", [])
        scores = token_scores(hypothesis, entries) if tokens else word_scores(hypothesis, entries)
        spaced = token_spaces(model, hypothesis, entries) if tokens else [False] * len(entries)
        first = True
        for entry, score, space in zip(entries, scores, spaced, strict=True):
            text = ("".join(entry["char"]) if tokens else str(entry["word"])).replace("\u2581", " ").strip()
            if not text:
                continue
            if space and not first:  # a space the model emitted: kept, since the transcript joins an unspaced
                text = " " + text  # language's tokens with nothing between them
            first = False
            start = min(segment.end_s, segment.start_s + float(entry["start"]))
            end = min(segment.end_s, max(start, segment.start_s + float(entry["end"])))
            words.append(Word(segment.unit_id, round(start, 3), round(end, 3), text, score))
    return words


def token_spaces(model, hypothesis, entries: list[dict]) -> list[bool]:
    """Whether each timestamp token starts with the model's word boundary (SentencePiece's "\u2581", which the
    timestamps' text drops): from the hypothesis's emitted token ids; none when the counts differ."""
    vocabulary = model.tokenizer.vocab_size
    ids = [int(t) for t in (hypothesis.y_sequence if hypothesis.y_sequence is not None else []) if int(t) < vocabulary]
    if len(ids) != len(entries):
        return [False] * len(entries)
    return [piece.startswith("\u2581") for piece in model.tokenizer.ids_to_tokens(ids)]


def token_scores(hypothesis, entries: list[dict]) -> list[float | None]:
    """One confidence per timestamp token (NeMo's `token_confidence`, one per emitted token); none when the counts
    differ."""
    confidence = getattr(hypothesis, "token_confidence", None)
    if confidence is None or len(confidence) != len(entries):
        return [None] * len(entries)
    return [round(float(c), 4) for c in confidence]


def word_scores(hypothesis, entries: list[dict]) -> list[float | None]:
    """One confidence per timestamp word. NeMo computes them over `hypothesis.words` (the text split), which it
    never checks against the timestamps' words: where the two lists differ, no scores rather than misaligned ones."""
    confidence = getattr(hypothesis, "word_confidence", None)
    if (confidence is None or len(confidence) != len(entries)
            or [e["word"] for e in entries] != list(hypothesis.words or [])):
        return [None] * len(entries)
    return [round(float(c), 4) for c in confidence]
