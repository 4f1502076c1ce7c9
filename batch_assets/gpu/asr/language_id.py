"""Which language a unit speaks, from its speech: the language identification stage of the GPU section.

The model is an `EncDecSpeakerLabelModel` whose labels are language codes (NeMo's `langid_ambernet`, or the builtin
`builtin:tiny-langid`; `models/langid_config.py`). It hears the unit's first `LID_SPEECH_S` seconds of speech, the
VAD regions joined (so silence and music do not vote), as WhisperX hears a file's first 30 s. Each unit is its own
forward (a batch of one): a unit's language and confidence never depend on which units share its flight, so every
lever and a rerun of some units give the same answer. Confidence is the softmax probability of the language named.
"""

from __future__ import annotations

import dataclasses

import numpy as np

SAMPLE_RATE = 16_000
LID_SPEECH_S = 20.0
MIN_SPEECH_S = 0.5  # shorter speech is padded with its own repeats (the model pools over time)


@dataclasses.dataclass(frozen=True)
class Detection:
    language: str  # the model's label, lowercased (ISO 639-1 where the model uses it)
    confidence: float


def speech_sample(waveform: np.ndarray, regions: list[tuple[float, float]], seconds: float = LID_SPEECH_S
                  ) -> np.ndarray:
    """The unit's first `seconds` of speech: its VAD regions' samples, in order, joined."""
    pieces, left = [], int(seconds * SAMPLE_RATE)
    for start_s, end_s in regions:
        piece = waveform[int(start_s * SAMPLE_RATE):int(end_s * SAMPLE_RATE)][:left]
        pieces.append(piece)
        left -= len(piece)
        if left <= 0:
            break
    speech = np.concatenate(pieces) if pieces else waveform[:0]
    minimum = int(MIN_SPEECH_S * SAMPLE_RATE)
    if 0 < len(speech) < minimum:
        speech = np.tile(speech, -(-minimum // len(speech)))
    return speech.astype(np.float32, copy=False)


def labels_of(model) -> list[str]:
    return [str(label).lower() for label in model.cfg.train_ds.labels]


def identify(model, device, speech: np.ndarray) -> Detection:
    """The language of `speech` (one unit's sample) and the model's probability for it."""
    import torch

    with torch.inference_mode():
        audio = torch.from_numpy(np.ascontiguousarray(speech)).to(device).unsqueeze(0)
        logits, _ = model.forward(input_signal=audio, input_signal_length=torch.tensor([audio.shape[1]],
                                                                                       device=device))
        probabilities = torch.softmax(logits.float(), dim=-1)[0]
    best = int(torch.argmax(probabilities))
    return Detection(labels_of(model)[best], round(float(probabilities[best]), 6))
