"""The ffmpeg binary the `imageio-ffmpeg` wheel ships: what it says of a file (`parse_ffmpeg_header`) and its
decode of one (`FfmpegStream`), for the listing's estimates (`source/header_probe.py`) and the decoder
(`source/decode.py`). A process of its own per file: a decoder that crashes fails its unit, not the step. No Dagster.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator

import numpy as np

from batch_assets.source.containers import AudioInfo, DecodeError


def ffmpeg_exe() -> str:
    """The ffmpeg binary the `imageio-ffmpeg` wheel ships."""
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


_STREAM = re.compile(r"Audio: ([a-z0-9_]+)[^,]*, (\d+) Hz, ([^,]+),(?: ([a-z0-9]+)(?:p|le|be)?\b[^,\n]*)?")
_DURATION = re.compile(r"Duration: (\d+):(\d+):(\d+(?:\.\d+)?)")
_BITRATE = re.compile(r"(\d+) kb/s")
_CONTEXT = re.compile(r"\[[^\]]* @ 0x[0-9a-f]+\]\s*")  # ffmpeg's "[aac @ 0x55…]" before a message
_BITS = {"u8": 8, "s16": 16, "s24": 24, "s32": 32, "flt": 32, "dbl": 64, "s64": 64}
FLAC_RATIO = 0.6  # a FLAC's bytes per PCM byte, about (speech): a length estimate where none is stated
FALLBACK_BITRATE_BPS = 32_000  # a compressed stream's bitrate when nothing states one (Opus and Vorbis voice)
DECODER_STOPPED = "ffmpeg stopped"  # how a reason says that ffmpeg gave up part-way (`FfmpegStream.stopped`)
FALLBACK_VIDEO_BITRATE_BPS = 500_000  # beside it, a video's (a screen or meeting recording) when nothing states one
_OVERALL = re.compile(r"Duration: [^\n]*bitrate: (\d+) kb/s")
_CHANNEL_NAMES = {"mono": 1, "stereo": 2, "2.1": 3, "quad": 4, "5.0": 5, "5.1": 6, "6.1": 7, "7.1": 8}


def _channels_from(layout: str) -> int:
    layout = layout.strip().split("(")[0]
    if layout in _CHANNEL_NAMES:
        return _CHANNEL_NAMES[layout]
    match = re.match(r"(\d+) channels", layout)
    if match:
        return int(match.group(1))
    raise DecodeError(f"unknown channel layout {layout!r}")


class FfmpegStream:
    """A file decoded by ffmpeg at its native rate and channel count (our downmix and resampler do the rest): iterate
    for its float samples, read from a pipe a block at a time (a file input, not a pipe: mp4 containers need to
    seek). `info.frames` is the header's estimate; the blocks are what decoded. ffmpeg skips a corrupt packet and
    goes on; where it gives up after it decoded audio, `stopped` holds what it said (the audio before is kept: the
    caller judges the unit cut short); where it decoded nothing, iterating raises `DecodeError`."""

    def __init__(self, path: str, scratch: str, block_frames: int):
        self.path, self.scratch, self.block_frames, self.stopped = path, scratch, block_frames, ""
        probe = subprocess.run([ffmpeg_exe(), "-hide_banner", "-i", path], capture_output=True, text=True)
        self.info = parse_ffmpeg_header(probe.stderr, os.path.getsize(path))

    def __iter__(self) -> Iterator[np.ndarray]:
        channels, decoded = self.info.channels, False
        with open(os.path.join(self.scratch, "ffmpeg.log"), "w+b") as errors:  # a file: a full pipe cannot stall it
            process = subprocess.Popen([ffmpeg_exe(), "-v", "error", "-i", self.path, "-map", "0:a:0", "-vn", "-f",
                                        "f32le", "-acodec", "pcm_f32le", "-"], stdout=subprocess.PIPE, stderr=errors)
            try:
                size, pending = self.block_frames * channels * 4, b""
                while chunk := process.stdout.read(size):
                    chunk = pending + chunk
                    usable = len(chunk) - len(chunk) % (4 * channels)
                    pending = chunk[usable:]
                    if usable:
                        decoded = True
                        yield np.frombuffer(chunk[:usable], dtype="<f4").reshape(-1, channels)
            finally:
                process.stdout.close()
                code = process.wait()
            if code != 0:
                errors.seek(0)
                said = list(dict.fromkeys(_CONTEXT.sub("", line).strip()  # its first distinct words, no addresses
                                          for line in errors.read().decode(errors="replace").splitlines()))
                if not decoded:
                    raise DecodeError(f"ffmpeg could not decode: {'; '.join(said)[:200]}")
                self.stopped = f"{DECODER_STOPPED} (exit {code}): {'; '.join(said[:2])[:200]}"


def parse_ffmpeg_header(stderr: str, size: int, by_size: bool = False) -> AudioInfo:
    """Rate, channels and frames of the first audio stream in what `ffmpeg -i` printed of an object of `size` bytes;
    `DecodeError` when it names none. The frames are ffmpeg's duration, `estimated` where ffmpeg says it estimated
    it from the bitrate; where it states none (a live WebM or MKA, a FLAC written to a pipe) or `by_size` (the
    container states none, whatever ffmpeg made of the first fragment), an estimate from the size and the stream's
    bitrate (as stated, else PCM's, or a FLAC's at `FLAC_RATIO`, or `FALLBACK_BITRATE_BPS`; with a video stream, the
    container's bitrate, else that plus `FALLBACK_VIDEO_BITRATE_BPS`)."""
    stream, duration = _STREAM.search(stderr), None if by_size else _DURATION.search(stderr)
    if stream is None:
        last = stderr.strip().splitlines()[-1:] or ["no audio stream"]
        raise DecodeError(f"ffmpeg found no audio stream: {last[0][:200]}")
    codec, rate, channels = stream.group(1), int(stream.group(2)), _channels_from(stream.group(3))
    if duration is not None:
        hours, minutes, seconds = duration.groups()
        seconds = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        return AudioInfo(rate, channels, int(round(seconds * rate)), "Estimating duration from bitrate" in stderr)
    stated = _BITRATE.search(stderr[stream.start():].split("\n", 1)[0])
    pcm = rate * channels * _BITS.get(stream.group(4) or "", 16)
    bitrate = (int(stated.group(1)) * 1000 if stated else pcm if codec.startswith("pcm_")
               else pcm * FLAC_RATIO if codec == "flac" else FALLBACK_BITRATE_BPS)
    if "Video:" in stderr:  # the size holds the video too: the container's bitrate, else a video's guessed beside
        overall = _OVERALL.search(stderr)
        bitrate = int(overall.group(1)) * 1000 if overall else bitrate + FALLBACK_VIDEO_BITRATE_BPS
    return AudioInfo(rate, channels, int(size * 8 / max(bitrate, 1000) * rate), True)
