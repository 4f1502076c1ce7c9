"""Train the builtin language identification model on synthetic speech, on CPU, and ship it as `builtin:tiny-langid`.

    .venv/bin/python -m batch_assets.training.train_langid [--minutes 12]

Seeded end to end. For each language of `langid_config.BUILTIN_LANGUAGES` (English, Spanish, German, Japanese):
sentences of its common words (`models/sentences.py`; Japanese in kana), spoken by its espeak-ng training voices
(`training/corpus.py: VOICES`), with disjoint validation and test sentences, and a second test split spoken by
voices training never heard. The model (`langid_config.builtin_config`: NeMo's `EncDecSpeakerLabelModel`,
AmberNet's class at ~0.2 M parameters) learns to name the language of an utterance, also of a crop of it as short
as the section gives it (`gpu/asr/language_id.py`), until the time budget runs out, keeping the checkpoint with the
best validation accuracy. Writes `batch_assets/models/weights/tiny-langid.nemo` and a JSON report with the test
accuracies per language.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time

import numpy as np
import torch

from batch_assets.models.langid_config import BUILTIN_LANGUAGES, LANGID_SEED, build_langid, builtin_config
from batch_assets.models.sentences import make_sentences
from batch_assets.training.corpus import RATE, VOICES, Utterance, synthesize

WEIGHTS = pathlib.Path(__file__).resolve().parents[1] / "models" / "weights"
MIN_CROP_S = 1.5


def splits(language: str, train: int, val: int, test: int, seed: int) -> dict[str, list[Utterance]]:
    """One language's utterances: train/val/test sentences disjoint, test also in held-out voices."""
    rng = np.random.default_rng(seed)
    sentences = make_sentences(train + val + 2 * test, rng, vocabulary=2000, lengths=(5, 14), language=language)
    voices = VOICES[language]
    parts = {"train": sentences[:train], "val": sentences[train:train + val],
             "test": sentences[train + val:train + val + test], "test_unseen": sentences[train + val + test:]}
    return {name: synthesize(texts, list(voices.held_out) if name == "test_unseen" else voices.train(),
                             seed=seed * 10 + i)
            for i, (name, texts) in enumerate(parts.items())}


def batch_of(items: list[tuple[np.ndarray, int]], rng: np.random.Generator | None, crop_s: float | None):
    """Padded audio, lengths and labels; with `rng`, each utterance cropped to a random length (>= MIN_CROP_S)."""
    audios, labels = [], []
    for audio, label in items:
        if rng is not None and crop_s is not None and len(audio) > MIN_CROP_S * RATE:
            length = int(rng.uniform(MIN_CROP_S, max(MIN_CROP_S, min(crop_s, len(audio) / RATE))) * RATE)
            start = int(rng.integers(0, len(audio) - length + 1))
            audio = audio[start:start + length]
        audios.append(audio)
        labels.append(label)
    lengths = torch.tensor([len(a) for a in audios])
    padded = torch.zeros(len(audios), int(lengths.max()))
    for i, audio in enumerate(audios):
        padded[i, :len(audio)] = torch.from_numpy(audio)
    return padded, lengths, torch.tensor(labels)


def accuracy(model, items: list[tuple[np.ndarray, int]], batch: int = 32) -> tuple[float, dict[int, float]]:
    """Share of items whose language is named right, overall and per label (whole utterances, one at a time per
    batch of similar length)."""
    model.eval()
    order = sorted(range(len(items)), key=lambda i: len(items[i][0]))
    right = np.zeros(len(items), dtype=bool)
    with torch.no_grad():
        for start in range(0, len(order), batch):
            idx = order[start:start + batch]
            audio, lengths, labels = batch_of([items[i] for i in idx], None, None)
            logits, _ = model.forward(input_signal=audio, input_signal_length=lengths)
            right[idx] = (logits.argmax(dim=1) == labels).numpy()
    per = {label: float(right[[i for i, (_, lab) in enumerate(items) if lab == label]].mean())
           for label in sorted({lab for _, lab in items})}
    return float(right.mean()), per


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--train", type=int, default=1500, help="training sentences per language")
    parser.add_argument("--val", type=int, default=60)
    parser.add_argument("--test", type=int, default=120)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--crop", type=float, default=6.0, help="longest training crop, seconds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=pathlib.Path, default=WEIGHTS / "tiny-langid.nemo")
    args = parser.parse_args()
    torch.manual_seed(LANGID_SEED)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(LANGID_SEED)

    started = time.time()
    data: dict[str, list[tuple[np.ndarray, int]]] = {"train": [], "val": [], "test": [], "test_unseen": []}
    for label, language in enumerate(BUILTIN_LANGUAGES):
        for name, utterances in splits(language, args.train, args.val, args.test, LANGID_SEED + label).items():
            data[name].extend((u.audio, label) for u in utterances)
    synth_s = time.time() - started
    hours = sum(len(a) for a, _ in data["train"]) / RATE / 3600
    print(f"synthesized in {synth_s:.0f} s: {len(data['train'])} training utterances, {hours:.2f} h", flush=True)

    model = build_langid(builtin_config())
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    budget, train_started, step = args.minutes * 60, time.time(), 0
    best, best_state, history = -1.0, None, []
    while time.time() - train_started < budget:
        order = rng.permutation(len(data["train"]))
        for start in range(0, len(order) - args.batch + 1, args.batch):
            model.train()
            audio, lengths, labels = batch_of([data["train"][i] for i in order[start:start + args.batch]], rng,
                                              args.crop)
            logits, _ = model.forward(input_signal=audio, input_signal_length=lengths)
            loss = loss_fn(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step % 100 == 0:
                val, _ = accuracy(model, data["val"])
                history.append({"step": step, "loss": round(float(loss), 4), "val_accuracy": round(val, 4)})
                print(f"step {step} loss {float(loss):.3f} val {val:.3f} ({time.time() - train_started:.0f} s)",
                      flush=True)
                if val > best:
                    best, best_state = val, {k: v.clone() for k, v in model.state_dict().items()}
            if time.time() - train_started >= budget:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    test, test_per = accuracy(model, data["test"])
    unseen, unseen_per = accuracy(model, data["test_unseen"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save_to(str(args.out))
    report = {
        "languages": list(BUILTIN_LANGUAGES), "steps": step, "train_minutes": round((time.time() - train_started) / 60,
                                                                                    1),
        "train_utterances": len(data["train"]), "train_hours": round(hours, 2), "synthesis_seconds": round(synth_s),
        "parameters": sum(p.numel() for p in model.parameters()), "val_accuracy": best,
        "test_accuracy": test, "test_accuracy_per_language": {BUILTIN_LANGUAGES[k]: v for k, v in test_per.items()},
        "unseen_voices_accuracy": unseen,
        "unseen_voices_accuracy_per_language": {BUILTIN_LANGUAGES[k]: v for k, v in unseen_per.items()},
        "history": history,
    }
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "history"}, indent=1))


if __name__ == "__main__":
    main()
