"""Unit ids and keys; decoding of real files in several formats to 16 kHz mono."""

from __future__ import annotations

import io
import subprocess

import numpy as np
import pytest
import soundfile as sf

from batch_assets.ingest.units import key_problem, unit_ids
from batch_assets.source.decode import TARGET_SAMPLE_RATE, DecodeError, decode
from batch_assets.source.header_probe import probe


def test_unit_ids_are_stable_unique_and_safe():
    keys = ["a/b.wav", "a__b.wav", "weird name (1).wav", "x/y/z.flac", "weird_name__1_.wav"]
    ids = unit_ids(keys)
    assert len(set(ids)) == len(ids)
    assert ids == unit_ids(keys)
    assert ids[3] == "x__y__z.flac"
    for uid in ids:
        assert all(c.isalnum() or c in "._-" for c in uid)


@pytest.mark.parametrize("key", ["../etc/passwd.wav", "a/../../b.wav", "/abs.wav", "a//b.wav", "a\\b.wav", "./a.wav"])
def test_escaping_keys_are_refused(key):
    assert key_problem(key)


def test_normal_keys_pass():
    assert key_problem("calls/2026/call 1.wav") is None


def _tone(rate: int, seconds: float, channels: int) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    mono = 0.3 * np.sin(2 * np.pi * 440 * t)
    return np.stack([mono] * channels, axis=1).astype(np.float32)


@pytest.mark.parametrize("fmt,suffix", [("WAV", ".wav"), ("FLAC", ".flac"), ("OGG", ".ogg"), ("MP3", ".mp3")])
def test_soundfile_formats_decode_to_16k_mono(fmt, suffix):
    buffer = io.BytesIO()
    sf.write(buffer, _tone(8000, 2.0, 2), 8000, format=fmt)
    samples, info = decode(buffer.getvalue(), suffix)
    assert (info.sample_rate, info.channels) == (8000, 2)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert abs(len(samples) / TARGET_SAMPLE_RATE - 2.0) < 0.1
    assert probe(buffer.getvalue(), suffix).sample_rate == 8000


def test_m4a_goes_through_ffmpeg(tmp_path):
    import imageio_ffmpeg

    wav, m4a = tmp_path / "in.wav", tmp_path / "out.m4a"
    sf.write(wav, _tone(44100, 1.5, 2), 44100)
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(wav), "-c:a", "aac", str(m4a)],
                   check=True)
    samples, info = decode(m4a.read_bytes(), ".m4a")
    assert (info.sample_rate, info.channels) == (44100, 2)
    assert abs(len(samples) / TARGET_SAMPLE_RATE - 1.5) < 0.1
    assert abs(probe(m4a.read_bytes(), ".m4a").duration_s - 1.5) < 0.1


def test_random_bytes_are_undecodable():
    rng = np.random.default_rng(0)
    with pytest.raises(DecodeError):
        decode(rng.bytes(4096), ".wav")
    with pytest.raises(DecodeError):
        probe(rng.bytes(4096), ".wav")
