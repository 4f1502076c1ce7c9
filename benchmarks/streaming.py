"""Benchmark issue 55's promise: the day streams into the GPU steps. Through `batch-assets run` only, S3 source and
storage on a real S3 API server (moto) behind a counting proxy (`tests/s3_server.py`), a day of WAV dialogues and
compressed copies (FLAC, Ogg, MP3 of the same speech):

- source bytes read per run / source size (target at most 1.15: each object read once, plus header reads);
- bytes read of each object before the first GPU step started (target at most 128 KiB: a head and a tail read);
- bytes the storage holds after the run, per audio-hour (target at most 40 MB: VAD score arrays and tables);
- the run's wall time and the time from its start to its first GPU step.

    .venv/bin/python benchmarks/streaming.py --json benchmarks/results/cpu_streaming.json

One copy of the sample's dialogues is 0.131 audio-hours (14 objects): `--copies 2` is a 0.26 audio-hour day, 8 a
1.05 one, 31 a 4.06 one. `--stop-at-first-gpu` stops the run (Ctrl-C, as a user would) once its first GPU step
has started: the time to it, and the bytes read before it, without the rest of the day. `--checkout PATH` runs
another checkout's code (`git worktree add /tmp/before <commit>`) through the same proxy, for before and after:
the CLI runs with that folder as its working directory, which comes first on the path for `-m`.
`--decode-cost` measures only the decode's CPU seconds per audio-hour of common recorder formats (44.1 kHz stereo
WAV, FLAC, MP3, Ogg Vorbis and AAC, 48 kHz Opus, 16 kHz WAV), one thread: what sizes a GPU pod's CPUs.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

import soundfile as sf

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DAY = "2026-05-05"


def make_day(folder: pathlib.Path, copies: int) -> dict[str, bytes]:
    """WAV dialogues of the sample and a compressed copy of each (FLAC, Ogg Vorbis, MP3 in turn), `copies` times."""
    from batch_assets.long_units.long_audio import sample_audio_paths

    objects = {}
    formats = [("FLAC", ".flac"), ("OGG", ".ogg"), ("MP3", ".mp3")]
    for n in range(copies):
        for i, path in enumerate(sample_audio_paths(speech_only=True)):
            audio, rate = sf.read(path, dtype="float32")
            out = folder / f"{n:02d}_{path.stem}.wav"
            sf.write(out, audio, rate, subtype="PCM_16")
            fmt, suffix = formats[(i + n) % len(formats)]
            compressed = folder / f"{n:02d}_{path.stem}{suffix}"
            sf.write(compressed, audio, rate, format=fmt)
    for path in sorted(folder.iterdir()):
        objects[path.name] = path.read_bytes()
    return objects


def decode_cpu_s_per_audio_hour(objects: dict[str, bytes]) -> dict[str, float]:
    """CPU seconds (this process and its ffmpeg children) to decode an audio-hour of each suffix of the day to 16 kHz
    mono, one object after another on one thread."""
    import torch

    from batch_assets.source.decode import decode, suffix_of

    torch.set_num_threads(1)
    spent, heard = collections.Counter(), collections.Counter()
    for name, data in objects.items():
        before = _cpu_s()
        samples, _ = decode(data, suffix_of(name))
        spent[suffix_of(name)] += _cpu_s() - before
        heard[suffix_of(name)] += len(samples) / 16000
    return {suffix: round(spent[suffix] / heard[suffix] * 3600, 1) for suffix in sorted(spent)}


# (name, format for soundfile or None for ffmpeg's AAC, subtype, suffix, rate, channels): what recorders write
SOURCE_FORMATS = [("WAV 16 kHz mono", "WAV", "PCM_16", ".wav", 16000, 1),
                  ("WAV 44.1 kHz stereo", "WAV", "PCM_16", ".wav", 44100, 2),
                  ("FLAC 44.1 kHz stereo", "FLAC", "PCM_16", ".flac", 44100, 2),
                  ("MP3 44.1 kHz stereo", "MP3", "MPEG_LAYER_III", ".mp3", 44100, 2),
                  ("Ogg Vorbis 44.1 kHz stereo", "OGG", "VORBIS", ".ogg", 44100, 2),
                  ("Opus 48 kHz mono", "OGG", "OPUS", ".opus", 48000, 1),
                  ("AAC (M4A) 44.1 kHz stereo", None, None, ".m4a", 44100, 2)]


def decode_cost_by_format(scratch: pathlib.Path, seconds: float = 300.0) -> dict[str, float]:
    """CPU seconds per audio-hour to decode each of `SOURCE_FORMATS` to 16 kHz mono (`decode_file`, as the GPU step
    does), `seconds` of the sample's speech each: the sizing basis of a GPU pod's CPUs (docs/deployment.md)."""
    import numpy as np
    import soxr

    from batch_assets.long_units.long_audio import sample_audio_paths, sample_speech
    from batch_assets.source.decode import decode_file
    from batch_assets.source.ffmpeg import ffmpeg_exe

    speech = np.concatenate([sample_speech(p) for p in sample_audio_paths(speech_only=True)])
    speech = np.resize(speech, int(seconds * 16000))
    costs = {}
    for name, fmt, subtype, suffix, rate, channels in SOURCE_FORMATS:
        audio = soxr.resample(speech, 16000, rate) if rate != 16000 else speech
        audio = np.stack([audio, 0.8 * audio], axis=1) if channels == 2 else audio
        path = scratch / f"cost{suffix}"
        if fmt is None:
            sf.write(scratch / "cost-src.wav", audio, rate, subtype="PCM_16")
            subprocess.run([ffmpeg_exe(), "-y", "-loglevel", "error", "-i", str(scratch / "cost-src.wav"), "-c:a",
                            "aac", "-b:a", "128k", str(path)], check=True)
        else:  # in blocks: libsndfile's Vorbis encoder crashes on a few minutes written in one call
            with sf.SoundFile(path, "w", rate, channels, subtype, format=fmt) as out:
                for start in range(0, len(audio), 65536):
                    out.write(audio[start:start + 65536])
        before = _cpu_s()
        samples, _ = decode_file(str(path), suffix)
        costs[name] = round((_cpu_s() - before) / (len(samples) / 16000) * 3600, 1)
    return costs


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (ffmpeg)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def first_gpu_step_unix(dagster_home: str) -> float | None:
    import dagster as dg

    with dg.DagsterInstance.from_config(dagster_home) as instance:
        runs = instance.get_runs(limit=1)
        if not runs:
            return None
        run = runs[0]
        starts = [e.timestamp for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)
                  if "gpu_shard" in (e.step_key or "") or "gpu_leftover" in (e.step_key or "")]
    return min(starts) if starts else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=1, help="times the sample's dialogues are copied into the day")
    parser.add_argument("--stop-at-first-gpu", action="store_true",
                        help="stop the run (Ctrl-C) once its first GPU step has started")
    parser.add_argument("--checkout", type=pathlib.Path, default=REPO, help="the checkout whose code runs")
    parser.add_argument("--decode-cost", action="store_true",
                        help="only measure the decode's CPU seconds per audio-hour of each source format (no run)")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    if args.decode_cost:
        with tempfile.TemporaryDirectory() as scratch:
            costs = {"decode_cpu_s_per_audio_hour": decode_cost_by_format(pathlib.Path(scratch))}
        print(json.dumps(costs, indent=1))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(costs, indent=1) + "\n")
        return
    from tests.s3_server import S3Server

    with tempfile.TemporaryDirectory() as scratch, S3Server() as s3:
        scratch = pathlib.Path(scratch)
        (scratch / "day").mkdir()
        objects = make_day(scratch / "day", args.copies)
        client = s3.client()
        for bucket in ("source", "outputs"):
            client.create_bucket(Bucket=bucket)
        for name, data in objects.items():
            client.put_object(Bucket="source", Key=f"audio/{DAY}/{name}", Body=data)
        home = scratch / "dagster_home"
        home.mkdir()
        env = os.environ | {
            "DAGSTER_HOME": str(home), "BATCH_ASSETS_SOURCE_URL": "s3://source/audio",
            "BATCH_ASSETS_STORAGE_URL": "s3://outputs/batch-assets",
            "BATCH_ASSETS_S3_ENDPOINT_URL": s3.faulty_endpoint, "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1", "HF_HUB_OFFLINE": "1",
            "BATCH_ASSETS_TORCH_THREADS": os.environ.get("BATCH_ASSETS_TORCH_THREADS", "2"),
        }
        s3.proxy.served.clear()
        started = time.time()
        with open(scratch / "run.log", "w+") as log:
            run = subprocess.Popen([sys.executable, "-m", "batch_assets.cli", "run", "--partition", DAY], env=env,
                                   cwd=args.checkout, stdout=log, stderr=subprocess.STDOUT, text=True)
            stopped = False
            while run.poll() is None:
                time.sleep(0.5)
                # Dagster's event log of the run (the CLI writes it under DAGSTER_HOME/logs) says when a GPU step
                # starts; the instance itself is the run's while it creates its tables
                if args.stop_at_first_gpu and not stopped and any(
                        re.search(r"gpu_(shard|leftover)\S* - STEP_START", log.read_text(errors="replace"))
                        for log in (home / "logs").glob("*.log")):
                    run.send_signal(signal.SIGINT)
                    stopped = True
            wall = time.time() - started
            log.seek(0)
            if run.returncode != 0 and not stopped:
                sys.exit(f"the run failed:\n{log.read()[-5000:]}")
        first_gpu = first_gpu_step_unix(str(home))
        read, before_gpu = collections.Counter(), collections.Counter()
        for when, method, path, size in s3.proxy.served:
            if method == "GET" and path.startswith(f"/source/audio/{DAY}/"):
                key = path.rsplit("/", 1)[1]
                read[key] += size
                if first_gpu is not None and when < first_gpu:
                    before_gpu[key] += size
        stored = sum(o["Size"] for page in client.get_paginator("list_objects_v2").paginate(Bucket="outputs")
                     for o in page.get("Contents", []))
    source_bytes = sum(len(b) for b in objects.values())
    audio_h = sum(sf.info(io.BytesIO(data)).duration for data in objects.values()) / 3600
    whole = not args.stop_at_first_gpu  # a stopped run's reads and storage are not a day's
    result = {
        "objects": len(objects), "source_bytes": source_bytes, "audio_hours": round(audio_h, 4),
        "source_bytes_read": sum(read.values()) if whole else None,
        "read_over_size": round(sum(read.values()) / source_bytes, 3) if whole else None,
        "source_bytes_read_before_first_gpu_step": sum(before_gpu.values()),
        "max_bytes_read_per_object_before_first_gpu_step": max(before_gpu.values(), default=0),
        "storage_bytes_after_run": stored if whole else None,
        "storage_mb_per_audio_hour": round(stored / 1e6 / audio_h, 1) if whole else None,
        "run_wall_s": round(wall, 1) if whole else None,
        "start_to_first_gpu_step_s": round(first_gpu - started, 1) if first_gpu else None,
        "decode_cpu_s_per_audio_hour": decode_cpu_s_per_audio_hour(objects),
        "code": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.checkout, capture_output=True,
                               text=True).stdout.strip(),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
