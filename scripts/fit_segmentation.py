"""Fit the tiny powerset segmentation model briefly on synthetic speech, and save it as the shipped default.

A purely random PyanNet predicts one constant class everywhere; a few CPU minutes on espeak-ng speech
(random pseudo-word utterances from several voices, mixed into chunks with pauses, occasional overlap and
background noise) are enough for it to tell speech from silence and to start separating speakers.
The loss is permutation-invariant cross-entropy over the powerset classes, as in pyannote's own
training. Seeded; writes batch_assets/models/weights/segmentation.bin.

    .venv/bin/python scripts/fit_segmentation.py [--steps 400]      # needs espeak-ng; ~5 CPU minutes
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import subprocess
import tempfile
import time

import numpy as np
import soundfile as sf
import soxr
import torch
import torch.nn.functional as F

from batch_assets.models.builtin import SEGMENTATION_WEIGHTS
from batch_assets.models.pyannote_checkpoint import save_checkpoint
from batch_assets.models.tiny_segmentation import LOCAL_SPEAKERS, POWERSET_MAX, build_segmentation

RATE = 16_000
VOICES = ["en-us", "en-gb+m2", "en+f2", "en-us+f4", "en+m5", "en-gb-x-rp+f1", "en-us+m6", "en+klatt"]
CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"


def pseudo_sentence(rng: np.random.Generator) -> str:
    words = []
    for _ in range(rng.integers(3, 9)):
        syllables = rng.integers(1, 4)
        words.append("".join(rng.choice(list(CONSONANTS)) + rng.choice(list(VOWELS)) for _ in range(syllables)))
    return " ".join(words)


def synthesize(rng: np.random.Generator, per_voice: int) -> list[list[np.ndarray]]:
    voices: list[list[np.ndarray]] = []
    for voice in VOICES:
        clips = []
        for _ in range(per_voice):
            wpm, pitch = int(rng.integers(120, 190)), int(rng.integers(20, 80))
            with tempfile.NamedTemporaryFile(suffix=".wav") as tmp:
                subprocess.run(
                    ["espeak-ng", "-v", voice, "-s", str(wpm), "-p", str(pitch), "-w", tmp.name, pseudo_sentence(rng)],
                    check=True,
                    capture_output=True,
                )
                audio, rate = sf.read(tmp.name, dtype="float32")
            audio = soxr.resample(audio, rate, RATE)
            voiced = np.flatnonzero(np.abs(audio) > 0.01)
            clips.append(audio[voiced[0] : voiced[-1] + 1])
        voices.append(clips)
    return voices


def make_chunk(rng, voices, seconds: float) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """A mixture and its (local speaker, start sample, end sample) turns."""
    n = int(seconds * RATE)
    mix = np.zeros(n, dtype=np.float32)
    turns = []
    speakers = rng.choice(len(voices), size=rng.integers(0, LOCAL_SPEAKERS + 1), replace=False)
    cursor = int(rng.uniform(0.0, 1.5) * RATE)
    if len(speakers):
        for turn in range(int(rng.integers(1, 5))):
            local = turn % len(speakers)
            clip = voices[speakers[local]][rng.integers(len(voices[speakers[local]]))]
            start = cursor
            if turns and rng.random() < 0.15:  # overlap the previous turn a little
                start = max(0, cursor - int(rng.uniform(0.2, 0.8) * RATE))
            end = min(n, start + len(clip))
            if start >= n:
                break
            mix[start:end] += clip[: end - start] * rng.uniform(0.3, 1.0)
            turns.append((local, start, end))
            cursor = end + int(rng.uniform(0.1, 1.5) * RATE)
    mix += rng.normal(0.0, rng.uniform(0.0005, 0.01), size=n).astype(np.float32)
    return mix, turns


def targets(model, turns, num_samples: int) -> np.ndarray:
    frames = model.receptive_field
    num_frames = model.num_frames(num_samples)
    centers = (frames.start + np.arange(num_frames) * frames.step + frames.duration / 2) * RATE
    y = np.zeros((num_frames, LOCAL_SPEAKERS), dtype=np.float32)
    for local, start, end in turns:
        y[(centers >= start) & (centers < end), local] = 1.0
    return y


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--chunk-seconds", type=float, default=5.0)
    parser.add_argument("--per-voice", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rng = np.random.default_rng(args.seed)
    started = time.time()
    voices = synthesize(rng, args.per_voice)
    print(f"synthesised {sum(map(len, voices))} utterances in {time.time() - started:.0f} s")

    from pyannote.audio.utils.powerset import Powerset

    model = build_segmentation()
    powerset = Powerset(LOCAL_SPEAKERS, POWERSET_MAX)
    permutations = [list(p) for p in itertools.permutations(range(LOCAL_SPEAKERS))]
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    n = int(args.chunk_seconds * RATE)
    model.train()
    for step in range(1, args.steps + 1):
        batch = [make_chunk(rng, voices, args.chunk_seconds) for _ in range(args.batch)]
        x = torch.from_numpy(np.stack([b[0] for b in batch]))[:, None, :]
        y = torch.from_numpy(np.stack([targets(model, b[1], n) for b in batch]))
        log_probs = model(x)  # (batch, frames, powerset classes), log-softmax
        losses = []
        for perm in permutations:
            target = powerset.to_powerset(y[:, :, perm]).argmax(dim=-1)
            nll = F.nll_loss(log_probs.transpose(1, 2), target, reduction="none").mean(dim=1)
            losses.append(nll)
        loss = torch.stack(losses, dim=1).min(dim=1).values.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 0 or step == 1:
            with torch.no_grad():
                speech_pred = log_probs.argmax(dim=-1) != 0
                speech_true = y.sum(dim=-1) > 0
                accuracy = (speech_pred == speech_true).float().mean().item()
            print(f"step {step:4d} loss {loss.item():.3f} speech/non-speech frame accuracy {accuracy:.3f} "
                  f"({time.time() - started:.0f} s)", flush=True)
    model.eval()
    save_checkpoint(model, SEGMENTATION_WEIGHTS)
    print(f"saved {SEGMENTATION_WEIGHTS} ({SEGMENTATION_WEIGHTS.stat().st_size / 1e6:.2f} MB) in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
