"""Generate a partition of real audio files, good and bad, with the class each one must get."""

from __future__ import annotations

import io
import pathlib
import shutil
import subprocess

import numpy as np
import soundfile as sf

from batch_assets.storage.resource import REPO_ROOT

SPEECH = REPO_ROOT / "sample_data" / "audio" / "2026-01-15" / "meetings" / "standup.wav"


def _tone(rate: int, seconds: float, channels: int, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    mono = 0.3 * np.sin(2 * np.pi * freq * t)
    return np.stack([mono] * channels, axis=1).astype(np.float32)


def _wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def write_mixed_partition(root: pathlib.Path, long_seconds: float = 6.0) -> dict[str, tuple[str, str]]:
    """Write files under `root`; returns {relative key: (expected class, reason fragment)}.

    `long.flac` lasts `long_seconds`: run with a safety limit (`max_recording_seconds`) below it to see `too_long`.
    """
    import imageio_ffmpeg

    root.mkdir(parents=True, exist_ok=True)
    expected: dict[str, tuple[str, str]] = {}

    def put(rel: str, data: bytes, cls: str, reason: str = "") -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        expected[rel] = (cls, reason)

    speech, rate = sf.read(SPEECH, dtype="float32")
    put("good/speech.wav", _wav_bytes(speech[: rate * 4], rate), "ok")
    put("good/stereo_8k.wav", _wav_bytes(_tone(8000, 3.0, 2), 8000), "ok")
    mp3 = io.BytesIO()
    sf.write(mp3, _tone(44100, 2.5, 2, 330.0), 44100, format="MP3")
    put("good/music_44k.mp3", mp3.getvalue(), "ok")
    wav_path, m4a_path = root / "_tmp.wav", root / "_tmp.m4a"
    sf.write(wav_path, _tone(44100, 2.0, 1, 550.0), 44100)
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-y", "-i", str(wav_path), "-c:a", "aac",
                    str(m4a_path)], check=True)
    put("good/voice_memo.m4a", m4a_path.read_bytes(), "ok")
    wav_path.unlink()
    m4a_path.unlink()
    put("bad/empty.wav", b"", "empty", "zero bytes")
    put("bad/no_samples.wav", _wav_bytes(np.zeros((0, 1), dtype=np.float32), 16000), "empty", "zero samples")
    put("bad/truncated_header.wav", _wav_bytes(_tone(16000, 1.0, 1), 16000)[:20], "undecodable", "")
    put("bad/random_bytes.wav", np.random.default_rng(0).bytes(50_000), "undecodable", "")
    put("bad/long.flac", _flac(_tone(16000, long_seconds, 1)), "too_long", "safety limit")
    put("notes/readme.txt", b"not audio", "skipped", "")
    return expected


def _flac(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, 16000, format="FLAC")
    return buffer.getvalue()


def copy_tree_to_s3(client, bucket: str, local_root: pathlib.Path, prefix: str) -> None:
    for path in sorted(local_root.rglob("*")):
        if path.is_file():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{path.relative_to(local_root).as_posix()}",
                              Body=path.read_bytes())


def clean(path: pathlib.Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
