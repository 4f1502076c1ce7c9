"""Train the tiny diarization models on synthetic dialogues, on CPU, and ship them as `builtin:tiny-diarization`.

    .venv/bin/python -m batch_assets.training.train_diarization [--embedding-minutes 6] [--segmentation-minutes 15]

Seeded. Steps:
1. Speakers: espeak-ng accents x voice variants, each with a fixed pitch and rate; most for training,
   the rest held out (validation and test dialogues use only held-out speakers).
2. Speaker embedding (`train_embedding.py`): `TinyXVector` trained with an additive-margin softmax on 2 s crops.
3. PLDA: centring + LDA + a two-covariance PLDA fitted on the training speakers' embeddings, written in
   the two-file format pyannote's VBx clustering loads.
4. Segmentation: the powerset PyanNet trained with permutation-invariant cross-entropy on chunks of
   synthetic dialogue (pauses, overlaps, 1-3 speakers per chunk), starting from the shipped weights.
5. Pipeline: the clustering threshold / VBx factors are picked on validation dialogues by DER, then DER is
   measured on test dialogues (collar 0.5 s in pyannote's terms: +-0.25 s around each boundary).
Writes `batch_assets/models/weights/{segmentation.bin, embedding.bin, plda/, diarization.json}`.

    .venv/bin/python -m batch_assets.training.train_diarization --production-shaped-segmentation \
        [--segmentation-minutes 24]

trains only the production-shaped profile's segmentation model (segmentation-3.0's architecture and sizes,
10 s chunks: `models/production_shaped.py`) from scratch on the same speakers, and measures its DER in the
tiny pipeline (the shipped embedding and PLDA, step 1 is skipped), tuning step 5 on validation as above.
Writes `weights/{segmentation-3.0-shaped.bin, segmentation-3.0-shaped.json}`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import shutil
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

from batch_assets.models.environment import quiet_model_libraries
from batch_assets.training.corpus import RATE
from batch_assets.training.speakers import dialogue, make_speakers, utterance_pool
from batch_assets.training.train_embedding import embed, equal_error_rate, fit_plda, train_embedding

quiet_model_libraries()
WEIGHTS = pathlib.Path(__file__).resolve().parents[1] / "models" / "weights"
DEFAULT_PARAMS = {"segmentation": {"min_duration_off": 0.0}, "clustering": {"threshold": 0.6, "Fa": 0.07, "Fb": 0.8}}


# -- segmentation ----------------------------------------------------------------------------------
def frame_targets(model, turns, offset_s: float, seconds: float, local: int) -> np.ndarray:
    frames = model.receptive_field
    n = model.num_frames(int(seconds * RATE))
    centers = frames.start + np.arange(n) * frames.step + frames.duration / 2 + offset_s
    order = []
    y = np.zeros((n, local), dtype=np.float32)
    for name, start, end in sorted(turns, key=lambda t: t[1]):
        active = (centers >= start) & (centers < end)
        if not active.any():
            continue
        if name not in order:
            if len(order) == local:
                continue
            order.append(name)
        y[active, order.index(name)] = 1.0
    return y


def train_segmentation(pool, minutes: float, rng, duration: float, init: pathlib.Path | None, batch: int = 16,
                       architecture: dict | None = None):
    from pyannote.audio.utils.powerset import Powerset

    from batch_assets.models import tiny_segmentation as ts

    model = ts.build_segmentation(duration, architecture)
    if init is not None and init.exists():
        state = torch.load(init, map_location="cpu", weights_only=False)["state_dict"]
        model.load_state_dict(state)
    powerset = Powerset(ts.LOCAL_SPEAKERS, ts.POWERSET_MAX)
    perms = [list(p) for p in itertools.permutations(range(ts.LOCAL_SPEAKERS))]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    n = int(duration * RATE)
    started, step = time.time(), 0
    model.train()
    while time.time() - started < minutes * 60:
        xs, ys = [], []
        for _ in range(batch):
            if rng.random() < 0.15:  # a silent room: noise only, no speaker
                xs.append(rng.normal(0.0, rng.uniform(0.0003, 0.01), n).astype(np.float32))
                ys.append(np.zeros((model.num_frames(n), ts.LOCAL_SPEAKERS), dtype=np.float32))
                continue
            audio, turns = dialogue(pool, rng, turns=(4, 8), overlap_p=0.15)
            if len(audio) < n:
                audio = np.pad(audio, (0, n - len(audio)))
            start = int(rng.integers(0, len(audio) - n + 1))
            xs.append(audio[start : start + n])
            ys.append(frame_targets(model, turns, start / RATE, duration, ts.LOCAL_SPEAKERS))
        x = torch.from_numpy(np.stack(xs))[:, None, :]
        y = torch.from_numpy(np.stack(ys))
        log_probs = model(x)
        losses = [F.nll_loss(log_probs.transpose(1, 2), powerset.to_powerset(y[:, :, p]).argmax(-1),
                             reduction="none").mean(1) for p in perms]
        loss = torch.stack(losses, 1).min(1).values.mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % 50 == 0:
            print(f"segmentation step {step} loss {loss.item():.3f} ({time.time() - started:.0f} s)", flush=True)
    return model.eval(), step


# -- pipeline --------------------------------------------------------------------------------------
def build_pipeline_folder(folder: pathlib.Path, segmentation, embedding, plda_dir: pathlib.Path, params: dict) -> None:
    import yaml

    from batch_assets.models.pyannote_checkpoint import save_checkpoint

    save_checkpoint(segmentation, folder / "segmentation" / "pytorch_model.bin")
    save_checkpoint(embedding, folder / "embedding" / "pytorch_model.bin")
    shutil.copytree(plda_dir, folder / "plda", dirs_exist_ok=True)
    config = {"pipeline": {"name": "pyannote.audio.pipelines.SpeakerDiarization", "params": {
        "segmentation": "$model/segmentation", "embedding": "$model/embedding", "plda": "$model/plda",
        "clustering": "VBxClustering", "segmentation_step": 0.1, "embedding_exclude_overlap": True}}, "params": params}
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def as_files(dialogues) -> list[dict]:
    return [{"waveform": torch.from_numpy(audio)[None], "sample_rate": RATE, "uri": f"d{i}", "turns": turns}
            for i, (audio, turns) in enumerate(dialogues)]


def der(pipeline, files, collar: float = 0.5) -> float:
    from pyannote.core import Annotation, Segment
    from pyannote.metrics.diarization import DiarizationErrorRate

    metric = DiarizationErrorRate(collar=collar)
    for file in files:
        ref = Annotation(uri=file["uri"])
        for name, start, end in file["turns"]:
            ref[Segment(start, end)] = name
        metric(ref, pipeline(file).speaker_diarization)
    return float(abs(metric))


def main() -> None:
    from pyannote.audio import Pipeline

    parser = argparse.ArgumentParser()
    parser.add_argument("--speakers", type=int, default=100)
    parser.add_argument("--held-out", type=int, default=20)
    parser.add_argument("--per-speaker", type=int, default=20)
    parser.add_argument("--embedding-minutes", type=float, default=6.0)
    parser.add_argument("--segmentation-minutes", type=float, default=15.0)
    parser.add_argument("--duration", type=float, default=5.0, help="segmentation chunk seconds")
    parser.add_argument("--dialogues", type=int, default=12, help="validation and test dialogues each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=pathlib.Path, default=WEIGHTS)
    parser.add_argument("--init-segmentation", type=pathlib.Path,
                        help="start the segmentation model from this checkpoint")
    parser.add_argument("--production-shaped-segmentation", action="store_true",
                        help="train only segmentation-3.0-shaped (10 s chunks) with the shipped embedding and PLDA")
    args = parser.parse_args()
    if args.production_shaped_segmentation:
        from batch_assets.models.production_shaped import SEGMENTATION_CHUNK_S
        args.duration = SEGMENTATION_CHUNK_S
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    started = time.time()
    report: dict = {"seed": args.seed}

    speakers = make_speakers(args.speakers, rng)
    pool = utterance_pool(speakers, args.per_speaker, rng)
    train_names = [s.name for s in speakers[: -args.held_out]]
    held = [s.name for s in speakers[-args.held_out :]]
    val_pool = {n: pool[n] for n in held[: len(held) // 2]}
    test_pool = {n: pool[n] for n in held[len(held) // 2 :]}
    train_pool = {n: pool[n] for n in train_names}
    report["synthesis_s"] = time.time() - started
    print(f"{len(speakers)} speakers, {sum(map(len, pool.values()))} utterances in {report['synthesis_s']:.0f} s",
          flush=True)

    work = pathlib.Path(tempfile.mkdtemp(prefix="tiny-diarization-"))
    architecture = None
    if args.production_shaped_segmentation:
        from pyannote.audio import Model

        from batch_assets.models.builtin import EMBEDDING_WEIGHTS, PLDA_DIR
        from batch_assets.models.production_shaped import SEGMENTATION_ARCHITECTURE

        embedding, architecture = Model.from_pretrained(EMBEDDING_WEIGHTS).eval(), SEGMENTATION_ARCHITECTURE
        shutil.copytree(PLDA_DIR, work / "plda")
    else:
        embedding, steps = train_embedding(train_pool, train_names, args.embedding_minutes, rng)
        test_clips = [(n, c) for n in held for c in pool[n][:8]]
        report["embedding"] = {"steps": steps, "parameters": sum(p.numel() for p in embedding.parameters()),
                               "eer_held_out_speakers": equal_error_rate(embed(embedding, [c for _, c in test_clips]),
                                                                         np.array([n for n, _ in test_clips]))}
        print(json.dumps(report["embedding"]), flush=True)
        train_clips = [(n, c) for n in train_names for c in pool[n]]
        fit_plda(embed(embedding, [c for _, c in train_clips]), np.array([n for n, _ in train_clips]), 32,
                 work / "plda")

    init = args.init_segmentation
    seg_started = time.time()
    segmentation, steps = train_segmentation(train_pool, args.segmentation_minutes, rng, args.duration, init,
                                             architecture=architecture)
    report["segmentation"] = {"steps": steps, "minutes": (time.time() - seg_started) / 60, "chunk_s": args.duration,
                              "parameters": sum(p.numel() for p in segmentation.parameters())}

    val = as_files([dialogue(val_pool, rng) for _ in range(args.dialogues)])
    test = as_files([dialogue(test_pool, rng) for _ in range(args.dialogues)])
    build_pipeline_folder(work / "pipeline", segmentation, embedding, work / "plda", DEFAULT_PARAMS)
    pipeline = Pipeline.from_pretrained(work / "pipeline")
    pipeline.training = True  # pyannote caches segmentations and embeddings per file while tuning
    best = None
    for threshold, fa, fb in itertools.product([0.5, 0.6, 0.7, 0.8], [0.07, 0.3], [0.8, 3.0]):
        params = {"segmentation": {"min_duration_off": 0.0}, "clustering": {"threshold": threshold, "Fa": fa, "Fb": fb}}
        pipeline.instantiate(params)
        value = der(pipeline, val)
        print(f"threshold {threshold} Fa {fa} Fb {fb}: validation DER {value:.3f}", flush=True)
        if best is None or value < best[0]:
            best = (value, params)
    report["params"], report["validation_der"] = best[1], best[0]
    pipeline.training = False
    pipeline.instantiate(best[1])
    build_pipeline_folder(work / "pipeline", segmentation, embedding, work / "plda", best[1])
    report["test_der_collar_0.5"] = der(pipeline, test, collar=0.5)
    report["test_der_collar_0.25"] = der(pipeline, test, collar=0.25)
    report["test_der_no_collar"] = der(pipeline, test, collar=0.0)
    report["total_minutes"] = (time.time() - started) / 60

    args.out.mkdir(parents=True, exist_ok=True)
    if args.production_shaped_segmentation:
        from batch_assets.models.production_shaped import SEGMENTATION_REPORT, SEGMENTATION_WEIGHTS

        shutil.copyfile(work / "pipeline" / "segmentation" / "pytorch_model.bin", args.out / SEGMENTATION_WEIGHTS.name)
        (args.out / SEGMENTATION_REPORT.name).write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report, indent=2))
        return
    shutil.copyfile(work / "pipeline" / "segmentation" / "pytorch_model.bin", args.out / "segmentation.bin")
    shutil.copyfile(work / "pipeline" / "embedding" / "pytorch_model.bin", args.out / "embedding.bin")
    shutil.copytree(work / "plda", args.out / "plda", dirs_exist_ok=True)
    (args.out / "diarization.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
