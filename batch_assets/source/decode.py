"""Decode any supported container to 16 kHz mono float32.

Two decoders, each where it is the better one (`docs/benchmarks.md`: decode CPU per audio-hour):
- soundfile (libsndfile) in-process: WAV, FLAC, Ogg (Vorbis, Opus) and MP3 whose length it can trust: not a FLAC
  without a sample count (written to a pipe), not an MP3 without a Xing, Info or VBRI frame (`source/containers.py`:
  libsndfile stops such an MP3 at its first frame's guess);
- the ffmpeg binary that the `imageio-ffmpeg` wheel ships (no system package): everything else, to the end of the
  stream: MP4/M4A/M4V/MOV/3GP (the first audio track; video is never decoded), WebM/MKA, AMR, raw AAC, WMA, CAF,
  and the FLAC and MP3 streams above; also whatever libsndfile fails to open or read.
Multichannel audio is downmixed by averaging; resampling uses soxr (a real band-limited resampler, not
interpolation). The original rate and channel count are kept for the manifest.

`decode_file` streams: it reads a block of frames at a time, downmixes it and feeds soxr's streaming
resampler (bit-identical to resampling the whole signal at once), writing into one array sized from the
header. So decoding holds the 16 kHz mono result plus one block, never the object's bytes or its
multichannel samples (a 180 s, 8-channel, 48 kHz WAV: 11.5 MB of result, not 300+ MB).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import subprocess
import tempfile
from collections.abc import Iterator

import numpy as np
import soundfile as sf
import soxr

from batch_assets.source.containers import MP3_SCAN, UNKNOWN, id3v2_size, mp3_states_its_length

TARGET_SAMPLE_RATE = 16_000
# what listing takes for audio: recorders', phones', browsers' and meeting tools' files (a video's audio track)
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".mp4", ".m4v", ".mov", ".3gp", ".webm", ".mka",
                    ".amr", ".aac", ".wma", ".caf")
SOUNDFILE_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus")  # libsndfile decodes these (when it trusts them)


class DecodeError(Exception):
    """The bytes are not decodable audio; the message is the reason recorded for the unit."""


@dataclasses.dataclass(frozen=True)
class AudioInfo:
    sample_rate: int
    channels: int
    frames: int
    estimated: bool = False  # the container states no exact length: `frames` is an estimate
    stopped: str = ""  # the decoder gave up part-way, after it had decoded `frames`: what it said

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate if self.sample_rate else 0.0


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


BLOCK_FRAMES = 16384  # frames read, downmixed and resampled at a time


class _FfmpegStream:
    """A file decoded by ffmpeg at its native rate and channel count (our downmix and resampler do the rest): iterate
    for its float samples, read from a pipe a block at a time (a file input, not a pipe: mp4 containers need to
    seek). `info.frames` is the header's estimate; the blocks are what decoded. ffmpeg skips a corrupt packet and
    goes on; where it gives up after it decoded audio, `stopped` holds what it said (the audio before is kept: the
    caller judges the unit cut short); where it decoded nothing, iterating raises `DecodeError`."""

    def __init__(self, path: str, scratch: str):
        self.path, self.scratch, self.stopped = path, scratch, ""
        probe = subprocess.run([ffmpeg_exe(), "-hide_banner", "-i", path], capture_output=True, text=True)
        self.info = parse_ffmpeg_header(probe.stderr, os.path.getsize(path))

    def __iter__(self) -> Iterator[np.ndarray]:
        channels, decoded = self.info.channels, False
        with open(os.path.join(self.scratch, "ffmpeg.log"), "w+b") as errors:  # a file: a full pipe cannot stall it
            process = subprocess.Popen([ffmpeg_exe(), "-v", "error", "-i", self.path, "-map", "0:a:0", "-vn", "-f",
                                        "f32le", "-acodec", "pcm_f32le", "-"], stdout=subprocess.PIPE, stderr=errors)
            try:
                size, pending = BLOCK_FRAMES * channels * 4, b""
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
                self.stopped = f"ffmpeg stopped (exit {code}): {'; '.join(said[:2])[:200]}"


def parse_ffmpeg_header(stderr: str, size: int, by_size: bool = False) -> AudioInfo:
    """Rate, channels and frames of the first audio stream in what `ffmpeg -i` printed of an object of `size` bytes;
    `DecodeError` when it names none. The frames are ffmpeg's duration, `estimated` where ffmpeg says it estimated
    it from the bitrate; where it states none (a live WebM or MKA, a FLAC written to a pipe) or `by_size` (the
    container states none, whatever ffmpeg made of the first fragment), an estimate from the size and the stream's
    bitrate (as stated, else PCM's, or a FLAC's at `FLAC_RATIO`, or `FALLBACK_BITRATE_BPS`)."""
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
    return AudioInfo(rate, channels, int(size * 8 / bitrate * rate), True)


def to_target(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """(frames, channels) or (frames,) at any rate -> (frames,) float32 mono at 16 kHz."""
    mono = samples.mean(axis=1) if samples.ndim == 2 else samples
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    if sample_rate != TARGET_SAMPLE_RATE and len(mono):
        mono = soxr.resample(mono, sample_rate, TARGET_SAMPLE_RATE, quality="HQ").astype(np.float32)
    return mono


class _Resampled:
    """16 kHz mono float32 built block by block into one array sized from the expected length."""

    def __init__(self, sample_rate: int, expected_frames: int):
        self.rate = sample_rate
        size = int(np.ceil(expected_frames * TARGET_SAMPLE_RATE / sample_rate)) + 16 if sample_rate else 0
        self.out, self.length, self.fed = np.empty(size, dtype=np.float32), 0, False
        self.stream = (soxr.ResampleStream(sample_rate, TARGET_SAMPLE_RATE, 1, dtype="float32", quality="HQ")
                       if sample_rate != TARGET_SAMPLE_RATE else None)

    def add(self, block: np.ndarray) -> None:
        for piece in self.pieces(block):
            self._append(piece)

    def pieces(self, block: np.ndarray | None) -> Iterator[np.ndarray]:
        """The resampled output of one more block (None: the end, flushing the resampler), without keeping it."""
        if block is None:
            if self.stream is not None and self.fed:
                yield self.stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
            return
        if not np.all(np.isfinite(block)):
            raise DecodeError("decoded samples contain NaN or infinity")
        mono = np.ascontiguousarray(block.mean(axis=1), dtype=np.float32)  # the same per frame as a whole-signal mean
        self.fed = self.fed or len(mono) > 0
        yield self.stream.resample_chunk(mono) if self.stream is not None else mono

    def _append(self, piece: np.ndarray) -> None:
        end = self.length + len(piece)
        if end > len(self.out):  # the header under-declared the length: grow (rare)
            self.out = np.concatenate([self.out[: self.length],
                                       np.empty(max(end - self.length, len(self.out) // 4), np.float32)])
        self.out[self.length : end] = piece
        self.length = end

    def result(self) -> np.ndarray:
        for piece in self.pieces(None):
            self._append(piece)
        return self.out[: self.length]


class UntrustedLength(Exception):
    """libsndfile would decode this stream only as far as a length its header does not state: ffmpeg decodes it."""


def _soundfile_handle(path: str, suffix: str) -> sf.SoundFile:
    """The file opened by libsndfile when it decodes it whole (`UntrustedLength` when it would not: a FLAC without a
    sample count, an MP3 without a length frame, a container libsndfile is not used for)."""
    if suffix not in SOUNDFILE_EXTENSIONS:
        raise UntrustedLength(f"{suffix} is decoded by ffmpeg")
    if suffix == ".mp3":
        with open(path, "rb") as raw:
            skip = id3v2_size(raw.read(10))
            raw.seek(skip)
            if not mp3_states_its_length(raw.read(MP3_SCAN)):
                raise UntrustedLength("an MP3 without a Xing, Info or VBRI frame")
    handle = sf.SoundFile(path)
    if handle.frames >= UNKNOWN:
        handle.close()
        raise UntrustedLength("no length stated (a stream written to a pipe)")
    return handle


def _soundfile_decode(path: str, suffix: str) -> tuple[np.ndarray, AudioInfo]:
    with _soundfile_handle(path, suffix) as handle:
        rate, channels = int(handle.samplerate), int(handle.channels)
        resampled, frames = _Resampled(rate, max(int(handle.frames), 0)), 0
        for block in handle.blocks(blocksize=BLOCK_FRAMES, dtype="float32", always_2d=True):
            resampled.add(block)
            frames += len(block)
    return resampled.result(), AudioInfo(rate, channels, frames)


def decode_file(path: str, suffix: str) -> tuple[np.ndarray, AudioInfo]:
    """Decode a local file (container named by `suffix`) to 16 kHz mono float32, and the original format, streaming:
    soundfile where it decodes the whole stream, ffmpeg for the rest and for what soundfile cannot open or read."""
    try:
        return _soundfile_decode(path, suffix)
    except DecodeError:  # decoded, but not to finite samples: no other decoder will do better
        raise
    except Exception as soundfile_error:
        with _ffmpeg_fallback(path, soundfile_error) as stream:
            info = stream.info
            resampled, frames = _Resampled(info.sample_rate, info.frames), 0
            for block in stream:
                resampled.add(block)
                frames += len(block)
            return resampled.result(), AudioInfo(info.sample_rate, info.channels, frames, stopped=stream.stopped)


@contextlib.contextmanager
def _ffmpeg_fallback(path: str, soundfile_error: Exception) -> Iterator[_FfmpegStream]:
    """ffmpeg's decode of a file soundfile does not decode (in a scratch folder beside it); a failure of ffmpeg too
    is one `DecodeError` naming both decoders' reasons."""
    with tempfile.TemporaryDirectory(prefix="decode-", dir=os.path.dirname(path)) as scratch:
        try:
            yield _FfmpegStream(path, scratch)
        except DecodeError as ffmpeg_error:
            if isinstance(soundfile_error, UntrustedLength):  # ffmpeg was the decoder: its reason is the reason
                raise
            raise DecodeError(f"{ffmpeg_error} (soundfile: {str(soundfile_error)[:120]})") from None


def stream_file(path: str, suffix: str) -> Iterator[np.ndarray]:
    """`decode_file`'s result in pieces, in order, holding one block at a time: how a recording of any length is
    decoded into windows. soundfile first; ffmpeg when soundfile cannot open the file, or from where soundfile
    stopped when it fails part-way (a body cut off: ffmpeg decodes what is there, as `decode_file` does). The
    concatenation is bit-identical to `decode_file`'s result, but for a lossy file soundfile failed on part-way
    (there the samples before the failure are soundfile's, the rest ffmpeg's; `decode_file` takes all from ffmpeg)."""
    done = 0
    try:
        with _soundfile_handle(path, suffix) as handle:
            resampled = _Resampled(int(handle.samplerate), 0)
            for block in handle.blocks(blocksize=BLOCK_FRAMES, dtype="float32", always_2d=True):
                for piece in resampled.pieces(block):
                    done += len(piece)
                    yield piece
            yield from resampled.pieces(None)
    except DecodeError:  # decoded, but not to finite samples: no other decoder will do better
        raise
    except Exception as soundfile_error:
        with _ffmpeg_fallback(path, soundfile_error) as stream:
            resampled = _Resampled(stream.info.sample_rate, 0)
            for block in stream:
                for piece in resampled.pieces(block):
                    if len(piece) <= done:  # soundfile's samples of the same stretch were given already
                        done -= len(piece)
                        continue
                    yield piece[done:]
                    done = 0
            yield from resampled.pieces(None)


def decode(data: bytes, suffix: str) -> tuple[np.ndarray, AudioInfo]:
    """`decode_file` for bytes in memory (tests, tools); the pipeline decodes the staged file itself."""
    with _with_tempfile(data, suffix) as tmp:
        return decode_file(tmp.name, suffix)


def suffix_of(path: str) -> str:
    return pathlib.PurePosixPath(path).suffix.lower()
