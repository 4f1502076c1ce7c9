"""Decode any supported container to 16 kHz mono float32.

soundfile (libsndfile) reads wav, flac, ogg/vorbis and mp3 in-process; what it cannot read (m4a/aac,
opus in some builds) goes through the ffmpeg binary that the `imageio-ffmpeg` wheel ships, so no system
package is needed. Multichannel audio is downmixed by averaging; resampling uses soxr (a real
band-limited resampler, not interpolation). The original rate and channel count are kept for the
manifest.
"""

from __future__ import annotations

import dataclasses
import io
import pathlib
import re
import subprocess
import tempfile

import numpy as np
import soundfile as sf
import soxr

TARGET_SAMPLE_RATE = 16_000
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a")


class DecodeError(Exception):
    """The bytes are not decodable audio; the message is the reason recorded for the unit."""


@dataclasses.dataclass(frozen=True)
class AudioInfo:
    sample_rate: int
    channels: int
    frames: int

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate if self.sample_rate else 0.0


def _ffmpeg() -> str:
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


_STREAM = re.compile(r"Audio: [^,]+, (\d+) Hz, ([^,]+),")
_DURATION = re.compile(r"Duration: (\d+):(\d+):(\d+(?:\.\d+)?)")
_CHANNEL_NAMES = {"mono": 1, "stereo": 2, "2.1": 3, "quad": 4, "5.0": 5, "5.1": 6, "6.1": 7, "7.1": 8}


def _channels_from(layout: str) -> int:
    layout = layout.strip().split("(")[0]
    if layout in _CHANNEL_NAMES:
        return _CHANNEL_NAMES[layout]
    match = re.match(r"(\d+) channels", layout)
    if match:
        return int(match.group(1))
    raise DecodeError(f"unknown channel layout {layout!r}")


def _with_tempfile(data: bytes, suffix: str):
    tmp = tempfile.NamedTemporaryFile(suffix=suffix)
    tmp.write(data)
    tmp.flush()
    return tmp


def _ffmpeg_decode(data: bytes, suffix: str) -> tuple[np.ndarray, AudioInfo]:
    """Decode with ffmpeg at the native rate and channel count (our resampler and downmix do the rest)."""
    with _with_tempfile(data, suffix) as tmp:  # a file, not a pipe: mp4 containers need to seek
        probe = subprocess.run([_ffmpeg(), "-hide_banner", "-i", tmp.name], capture_output=True, text=True)
        stream = _STREAM.search(probe.stderr)
        if stream is None:
            last = probe.stderr.strip().splitlines()[-1:] or ["no audio stream"]
            raise DecodeError(f"ffmpeg found no audio stream: {last[0][:200]}")
        rate, channels = int(stream.group(1)), _channels_from(stream.group(2))
        run = subprocess.run(
            [_ffmpeg(), "-v", "error", "-i", tmp.name, "-vn", "-f", "f32le", "-acodec", "pcm_f32le", "-"],
            capture_output=True,
        )
    if run.returncode != 0:
        raise DecodeError(f"ffmpeg could not decode: {run.stderr.decode(errors='replace').strip()[:200]}")
    samples = np.frombuffer(run.stdout, dtype="<f4")
    usable = len(samples) - len(samples) % channels
    samples = samples[:usable].reshape(-1, channels)
    return samples, AudioInfo(rate, channels, samples.shape[0])


def _ffmpeg_probe(path: str) -> AudioInfo:
    result = subprocess.run([_ffmpeg(), "-hide_banner", "-i", path], capture_output=True, text=True)
    stream, duration = _STREAM.search(result.stderr), _DURATION.search(result.stderr)
    if stream is None or duration is None:
        raise DecodeError("not an audio file that soundfile or ffmpeg can read")
    hours, minutes, seconds = duration.groups()
    rate = int(stream.group(1))
    total = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    return AudioInfo(rate, _channels_from(stream.group(2)), int(round(total * rate)))


def probe_file(path: str) -> AudioInfo:
    """Rate, channels and length of a local file, from its header where the container allows it."""
    try:
        info = sf.info(path)
        return AudioInfo(int(info.samplerate), int(info.channels), int(info.frames))
    except Exception:  # soundfile cannot parse it: ask ffmpeg
        return _ffmpeg_probe(path)


def probe(data: bytes, suffix: str) -> AudioInfo:
    """`probe_file` for bytes in memory."""
    with _with_tempfile(data, suffix) as tmp:
        return probe_file(tmp.name)


def to_target(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """(frames, channels) or (frames,) at any rate -> (frames,) float32 mono at 16 kHz."""
    mono = samples.mean(axis=1) if samples.ndim == 2 else samples
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    if sample_rate != TARGET_SAMPLE_RATE and len(mono):
        mono = soxr.resample(mono, sample_rate, TARGET_SAMPLE_RATE, quality="HQ").astype(np.float32)
    return mono


def decode(data: bytes, suffix: str) -> tuple[np.ndarray, AudioInfo]:
    """Decode bytes (container named by `suffix`) to 16 kHz mono float32, and the original format."""
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
        info = AudioInfo(int(rate), samples.shape[1], samples.shape[0])
    except Exception as soundfile_error:
        try:
            samples, info = _ffmpeg_decode(data, suffix)
        except DecodeError as ffmpeg_error:
            raise DecodeError(f"{ffmpeg_error} (soundfile: {str(soundfile_error)[:120]})") from None
    if not np.all(np.isfinite(samples)):
        raise DecodeError("decoded samples contain NaN or infinity")
    return to_target(samples, info.sample_rate), info


def suffix_of(path: str) -> str:
    return pathlib.PurePosixPath(path).suffix.lower()
