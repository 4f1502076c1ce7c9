"""Train the tiny TDT model on synthetic speech, on CPU, and ship it as `builtin:tiny-tdt`.

    .venv/bin/python -m batch_assets.training.train_asr [--minutes 30] [--language es --out ...]

Seeded end to end. Steps: sentences of a language's common words (English by default; `--language es`, `de`
or `ja` for Spanish, German or Japanese, in that language's espeak-ng voices; Japanese is kana, transcribed
without spaces and scored by character error rate, `languages.written`; disjoint train/val/test; with
`--grammar N` also N grammatical sentences from `grammar.py`, with their own val/test splits), espeak-ng
speech (training voices; plus a test split in voices never heard in training), a sentencepiece BPE
tokenizer trained on the training text (the production models' path, `EncDecRNNTBPEModel`, which also
avoids NeMo 3.0.0's character-vocabulary TDT text bug), a ~1 M-parameter FastConformer-TDT trained with
the vectorised CPU TDT loss (`tdt_loss.py`) until the time budget runs out, keeping the checkpoint with
the best validation WER. Writes `batch_assets/models/weights/tiny-tdt.nemo` and a JSON report.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import tempfile
import time

import numpy as np
import torch

from batch_assets.models.languages import UNSPACED, written
from batch_assets.models.sentences import ASR_VOCABULARY_WORDS, make_sentences, mix_pseudo_words
from batch_assets.models.tdt_config import DURATIONS, model_config, train_tokenizer
from batch_assets.training.corpus import VOICES, join_utterances, synthesize, train_voices
from batch_assets.training.grammar import make_grammar_sentences
from batch_assets.training.tdt_loss import tdt_loss

WEIGHTS = pathlib.Path(__file__).resolve().parents[1] / "models" / "weights"


def error_rate(model, utterances, batch_size: int = 32, metric: str = "wer") -> float:
    """Word error rate, or with `metric="cer"` character error rate (a language written without spaces)."""
    import jiwer

    model.eval()
    with torch.no_grad():
        hyps = model.transcribe([u.audio for u in utterances], batch_size=batch_size, verbose=False)
    texts = [h.text if hasattr(h, "text") else str(h) for h in hyps]
    score = jiwer.cer if metric == "cer" else jiwer.wer
    return float(score([u.text for u in utterances], [t.strip() or "<empty>" for t in texts]))


def batches(utterances, batch_size: int, rng: np.random.Generator):
    order = np.argsort([len(u.audio) for u in utterances])
    groups = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(groups)
    return groups


def main() -> None:
    from nemo.collections.asr.models import EncDecRNNTBPEModel
    from omegaconf import OmegaConf

    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--train", type=int, default=5000)
    parser.add_argument("--val", type=int, default=120)
    parser.add_argument("--test", type=int, default=200)
    parser.add_argument("--language", choices=sorted(VOICES), default="en",
                        help="the language of the sentences and voices (the grammar is English only)")
    parser.add_argument("--words", type=int, default=ASR_VOCABULARY_WORDS,
                        help="sentences use the language's N most common words")
    parser.add_argument("--vocab", type=int, default=256, help="BPE vocabulary size")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=pathlib.Path, default=WEIGHTS / "tiny-tdt.nemo")
    parser.add_argument("--init", type=pathlib.Path, help="continue from this .nemo (its tokenizer; the same seeded "
                        "sentence draw, --train may extend it)")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--pseudo-words", type=float, default=0.0,
                        help="Japanese: replace this share of the words (every split) by made-up hiragana words "
                        "(sentences.mix_pseudo_words), drawn after the sentences")
    parser.add_argument("--pad", type=float, default=0.0,
                        help="up to this many seconds of quiet room before and after each utterance (every split)")
    parser.add_argument("--join", type=int, default=1,
                        help="every split's examples: runs of 1 to N consecutive utterances joined by pauses "
                        "(corpus.join_utterances: the section's merged segments)")
    parser.add_argument("--grammar", type=int, default=0,
                        help="also train on N grammatical sentences (grammar.py), with grammatical val/test splits")
    args = parser.parse_args()
    if args.grammar and args.language != "en":
        parser.error("--grammar writes English sentences: leave it out with --language " + args.language)
    if args.pseudo_words and args.language != "ja":
        parser.error("--pseudo-words makes up Japanese (hiragana) words: use it with --language ja")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    started = time.time()

    def split(sentences: list[str], n_train: int) -> tuple[list[str], list[str], list[str]]:
        return sentences[:n_train], sentences[n_train : n_train + args.val], sentences[n_train + args.val :]

    sentences = make_sentences(args.train + args.val + args.test, rng, vocabulary=args.words, language=args.language)
    if args.pseudo_words:  # its own draw: the sentences (and so every split) are the ones without it
        sentences = mix_pseudo_words(sentences, args.pseudo_words, np.random.default_rng(args.seed + 2))
    train_s, val_s, test_s = split(sentences, args.train)
    grammar_s = make_grammar_sentences(args.grammar + args.val + args.test, np.random.default_rng(args.seed + 1),
                                       vocabulary=args.words) if args.grammar else []
    g_train_s, g_val_s, g_test_s = split(grammar_s, args.grammar)
    voices, held_out = train_voices(args.language), list(VOICES[args.language].held_out)
    metric = "cer" if args.language in UNSPACED else "wer"
    lang = args.language

    def error(model, utterances) -> float:  # the language's error rate: words, or characters
        return error_rate(model, utterances, metric=metric)

    train = (synthesize(train_s, voices, seed=args.seed * 10 + 1, language=lang, pad_s=args.pad)
             + synthesize(g_train_s, voices, seed=args.seed * 10 + 5, pad_s=args.pad))
    val = synthesize(val_s + g_val_s, voices, seed=args.seed * 10 + 2, language=lang, pad_s=args.pad)
    test = synthesize(test_s, voices, seed=args.seed * 10 + 3, language=lang, pad_s=args.pad)
    unseen = synthesize(test_s, held_out, seed=args.seed * 10 + 4, language=lang, pad_s=args.pad)
    if args.join > 1:
        train, val, test, unseen = (join_utterances(split_, args.join, args.seed * 10 + 8 + k, lang)
                                    for k, split_ in enumerate((train, val, test, unseen)))
    g_test = synthesize(g_test_s, voices, seed=args.seed * 10 + 6)
    g_unseen = synthesize(g_test_s, held_out, seed=args.seed * 10 + 7)
    hours = sum(len(u.audio) for u in train) / 16000 / 3600
    print(f"synthesised {len(train)} training utterances ({hours:.2f} h) in {time.time() - started:.0f} s", flush=True)

    if args.init:
        model = EncDecRNNTBPEModel.restore_from(str(args.init), map_location="cpu")
    else:
        work = pathlib.Path(tempfile.mkdtemp(prefix="tiny-tdt-"))
        train_tokenizer([written(text, lang) for text in train_s], work, args.vocab)
        model = EncDecRNNTBPEModel(cfg=OmegaConf.create(model_config(str(work))))
    params = sum(p.numel() for p in model.parameters())
    blank = model.decoder.blank_idx
    print(f"model: {params / 1e6:.2f} M parameters, vocabulary {model.tokenizer.vocab_size}, blank {blank}", flush=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-3)
    budget_s = args.minutes * 60
    warmup = args.warmup

    def lr_at(step: int, elapsed_s: float) -> float:
        """Linear warm-up, then a cosine over the *time* budget (step rates vary 2x on shared cores)."""
        if step < warmup:
            return args.lr * (step + 1) / warmup
        return args.lr * max(0.02, 0.5 * (1 + math.cos(math.pi * min(1.0, elapsed_s / budget_s))))

    tokens = [model.tokenizer.text_to_ids(u.text) for u in train]
    best, best_state, history, step, epoch = float("inf"), None, [], 0, 0
    if args.init:  # the starting point is a candidate too
        best = error(model, val)
        best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        print(json.dumps({"init": str(args.init), f"val_{metric}": best}), flush=True)
    train_started = time.time()
    while time.time() - train_started < budget_s:
        epoch += 1
        model.train()
        losses = []
        for group in batches(train, args.batch, rng):
            if time.time() - train_started >= budget_s:
                break
            audio = [train[i].audio for i in group]
            lengths = torch.tensor([len(a) for a in audio])
            signal = torch.zeros(len(audio), int(lengths.max()))
            for row, a in enumerate(audio):
                signal[row, : len(a)] = torch.from_numpy(a)
            targets_list = [tokens[i] for i in group]
            target_lengths = torch.tensor([len(t) for t in targets_list])
            targets = torch.zeros(len(group), int(target_lengths.max()), dtype=torch.long)
            for row, t in enumerate(targets_list):
                targets[row, : len(t)] = torch.tensor(t)
            encoded, encoded_len = model.forward(input_signal=signal, input_signal_length=lengths)
            decoded, _, _ = model.decoder(targets=targets, target_length=target_lengths)
            joint = model.joint(encoder_outputs=encoded, decoder_outputs=decoded)
            loss = tdt_loss(joint, targets, encoded_len, target_lengths, DURATIONS, blank=blank, sigma=0.02)
            for g in optimizer.param_groups:
                g["lr"] = lr_at(step, time.time() - train_started)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            losses.append(loss.item())
            step += 1
        val_wer = error(model, val)
        history.append({"epoch": epoch, "step": step, "loss": float(np.mean(losses)) if losses else None,
                        f"val_{metric}": val_wer, "minutes": (time.time() - train_started) / 60})
        print(json.dumps(history[-1]), flush=True)
        if val_wer < best:
            best = val_wer
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.load_state_dict(best_state)
    model.eval()
    report = {
        "parameters": params, "training_hours_of_audio": hours, "train_utterances": len(train_s),
        "train_minutes": (time.time() - train_started) / 60, "steps": step, "epochs": epoch,
        f"val_{metric}": best, f"test_{metric}": error(model, test),
        f"test_{metric}_unseen_voices": error(model, unseen),
        "unseen_voices": held_out, "history": history, "seed": args.seed, "words": args.words,
        "language": args.language, "metric": metric, "pseudo_word_share": args.pseudo_words, "pad_s": args.pad,
        "joined_up_to": args.join,
        "continued_from": str(args.init) if args.init else None,
        "grammar_train_utterances": len(g_train_s),
    }
    if g_test:  # the grammatical held-out split: sentences the grammar wrote that no stage trained on
        report.update(test_wer_grammar=error(model, g_test), test_wer_grammar_unseen_voices=error(model, g_unseen))
    if args.init and args.init.with_suffix(".json").exists():  # the earlier stage's report, without its history
        earlier = json.loads(args.init.with_suffix(".json").read_text())
        report["earlier_stage"] = {k: v for k, v in earlier.items() if k != "history"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    model.save_to(str(args.out))
    report["size_mb"] = args.out.stat().st_size / 1e6
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "history"}, indent=2))


if __name__ == "__main__":
    main()
