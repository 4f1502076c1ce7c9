"""Decode any supported container to 16 kHz mono float32.

Two decoders, each where it is the better one (`docs/benchmarks.md`: decode CPU per audio-hour):
- soundfile (libsndfile) in-process: WAV, FLAC, Ogg (Vorbis, Opus) and MP3 whose length it can trust: not a FLAC
  without a sample count (written to a pipe), not an MP3 without a Xing, Info or VBRI frame (`source/containers.py`:
  libsndfile stops such an MP3 at its first frame's guess);
- the ffmpeg binary that the `imageio-ffmpeg` wheel ships (no system package): everything else, to the end of the
  stream: MP4/M4A/M4V/MOV/3GP (the first audio track; video is never decoded), WebM/MKA, AMR, raw AAC, WMA, CAF,
  and the FLAC and MP3 streams above; also whatever libsndfile fails to open or read.
Multichannel audio is downmixed by averaging; resampling uses soxr (a real band-limited resampler, not
interpolation). The original rate and channel count are kept for the manifest. `decode_channels` also keeps each
channel at 16 kHz (a unit that may be read channel by channel: `source/channels.py`), beside the same mix.

`decode_file` streams: it reads a block of frames at a time, downmixes it and feeds soxr's streaming
resampler (bit-identical to resampling the whole signal at once), writing into one array sized from the
header. So decoding holds the 16 kHz mono result plus one block, never the object's bytes or its
multichannel samples (a 180 s, 8-channel, 48 kHz WAV: 11.5 MB of result, not 300+ MB).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator

import numpy as np
import soundfile as sf
import soxr

from batch_assets.source.containers import (
    MP3_SCAN,
    UNKNOWN,
    AudioInfo,
    DecodeError,
    id3v2_size,
    mp3_states_its_length,
)
from batch_assets.source.ffmpeg import FfmpegStream

TARGET_SAMPLE_RATE = 16_000
# what listing takes for audio: recorders', phones', browsers' and meeting tools' files (a video's audio track)
AUDIO_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".mp4", ".m4v", ".mov", ".3gp", ".webm", ".mka",
                    ".amr", ".aac", ".wma", ".caf")
SOUNDFILE_EXTENSIONS = (".wav", ".flac", ".mp3", ".ogg", ".opus")  # libsndfile decodes these (when it trusts them)


def _with_tempfile(data: bytes, suffix: str):
    tmp = tempfile.NamedTemporaryFile(suffix=suffix)
    tmp.write(data)
    tmp.flush()
    return tmp


BLOCK_FRAMES = 16384  # frames read, downmixed and resampled at a time


def to_target(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """(frames, channels) or (frames,) at any rate -> (frames,) float32 mono at 16 kHz."""
    mono = samples.mean(axis=1) if samples.ndim == 2 else samples
    mono = np.ascontiguousarray(mono, dtype=np.float32)
    if sample_rate != TARGET_SAMPLE_RATE and len(mono):
        mono = soxr.resample(mono, sample_rate, TARGET_SAMPLE_RATE, quality="HQ").astype(np.float32)
    return mono


class _Resampled:
    """16 kHz float32 built block by block into one array sized from the expected length: the mix, or with `channels`
    (more than one) the mix and each channel side by side ((frames, 1 + channels), the mix first). One soxr stream
    resamples every column on its own, so the mix column is bit-identical to the mix resampled alone."""

    def __init__(self, sample_rate: int, expected_frames: int, channels: int = 0):
        self.rate, self.columns = sample_rate, 1 + channels if channels > 1 else 1
        size = int(np.ceil(expected_frames * TARGET_SAMPLE_RATE / sample_rate)) + 16 if sample_rate else 0
        self.out = np.empty((size,) if self.columns == 1 else (size, self.columns), dtype=np.float32)
        self.length, self.fed = 0, False
        self.stream = (soxr.ResampleStream(sample_rate, TARGET_SAMPLE_RATE, self.columns, dtype="float32",
                                           quality="HQ") if sample_rate != TARGET_SAMPLE_RATE else None)

    def add(self, block: np.ndarray) -> None:
        for piece in self.pieces(block):
            self._append(piece)

    def pieces(self, block: np.ndarray | None) -> Iterator[np.ndarray]:
        """The resampled output of one more block (None: the end, flushing the resampler), without keeping it."""
        if block is None:
            if self.stream is not None and self.fed:
                empty = np.zeros((0,) if self.columns == 1 else (0, self.columns), dtype=np.float32)
                yield self.stream.resample_chunk(empty, last=True)
            return
        if not np.all(np.isfinite(block)):
            raise DecodeError("decoded samples contain NaN or infinity")
        mono = np.ascontiguousarray(block.mean(axis=1), dtype=np.float32)  # the same per frame as a whole-signal mean
        data = mono if self.columns == 1 else np.ascontiguousarray(np.column_stack([mono, block]), dtype=np.float32)
        self.fed = self.fed or len(mono) > 0
        yield self.stream.resample_chunk(data) if self.stream is not None else data

    def _append(self, piece: np.ndarray) -> None:
        end = self.length + len(piece)
        if end > len(self.out):  # the header under-declared the length: grow (rare)
            grown = np.empty((max(end - self.length, len(self.out) // 4), *self.out.shape[1:]), np.float32)
            self.out = np.concatenate([self.out[: self.length], grown])
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


def split_mix(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(the mix, each channel as (channels, samples) or None) of decoded samples: a mix alone, or the mix and each
    channel side by side ((frames, 1 + channels): `_Resampled`'s, `stream_file`'s with `keep`). Views: a caller
    copies what it keeps."""
    if samples.ndim == 1:
        return samples, None
    return samples[:, 0], samples[:, 1:].T


def _decoded(blocks, rate: int, channels: int, expected: int, keep: bool) -> tuple[np.ndarray, np.ndarray | None,
                                                                                  int]:
    """(the mix, each channel when `keep` and there are several, frames) of a stream of (frames, channels) blocks."""
    resampled, frames = _Resampled(rate, max(expected, 0), channels if keep else 0), 0
    for block in blocks:
        resampled.add(block)
        frames += len(block)
    return (*split_mix(resampled.result()), frames)


def _soundfile_decode(path: str, suffix: str, keep: bool = False) -> tuple[np.ndarray, np.ndarray | None, AudioInfo]:
    with _soundfile_handle(path, suffix) as handle:
        rate, channels = int(handle.samplerate), int(handle.channels)
        blocks = handle.blocks(blocksize=BLOCK_FRAMES, dtype="float32", always_2d=True)
        mix, each, frames = _decoded(blocks, rate, channels, int(handle.frames), keep)
    return mix, each, AudioInfo(rate, channels, frames)


def decode_channels(path: str, suffix: str, keep: bool = True) -> tuple[np.ndarray, np.ndarray | None, AudioInfo]:
    """`decode_file`'s mix, and with `keep` each channel of a multichannel object at 16 kHz ((channels, samples), as
    long as the mix; None for one channel), in one pass (both then views of one array: `split_mix`)."""
    try:
        return _soundfile_decode(path, suffix, keep)
    except DecodeError:  # decoded, but not to finite samples: no other decoder will do better
        raise
    except Exception as soundfile_error:
        with _ffmpeg_fallback(path, soundfile_error) as stream:
            info = stream.info
            mix, each, frames = _decoded(stream, info.sample_rate, info.channels, info.frames, keep)
            return mix, each, AudioInfo(info.sample_rate, info.channels, frames, stopped=stream.stopped)


def decode_file(path: str, suffix: str) -> tuple[np.ndarray, AudioInfo]:
    """Decode a local file (container named by `suffix`) to 16 kHz mono float32, and the original format, streaming:
    soundfile where it decodes the whole stream, ffmpeg for the rest and for what soundfile cannot open or read."""
    mix, _, info = decode_channels(path, suffix, keep=False)
    return mix, info


@contextlib.contextmanager
def _ffmpeg_fallback(path: str, soundfile_error: Exception) -> Iterator[FfmpegStream]:
    """ffmpeg's decode of a file soundfile does not decode (in a scratch folder beside it); a failure of ffmpeg too
    is one `DecodeError` naming both decoders' reasons."""
    with tempfile.TemporaryDirectory(prefix="decode-", dir=os.path.dirname(path)) as scratch:
        try:
            yield FfmpegStream(path, scratch, BLOCK_FRAMES)
        except DecodeError as ffmpeg_error:
            if isinstance(soundfile_error, UntrustedLength):  # ffmpeg was the decoder: its reason is the reason
                raise
            raise DecodeError(f"{ffmpeg_error} (soundfile: {str(soundfile_error)[:120]})") from None


def stream_file(path: str, suffix: str, stopped: list[str] | None = None, keep: bool = False) -> Iterator[np.ndarray]:
    """`decode_file`'s result in pieces, in order, holding one block at a time: how a recording of any length is
    decoded into windows. soundfile first; ffmpeg when soundfile cannot open the file, or from where soundfile
    stopped when it fails part-way (a body cut off: ffmpeg decodes what is there, as `decode_file` does). The
    concatenation is bit-identical to `decode_file`'s result, but for a lossy file soundfile failed on part-way
    (there the samples before the failure are soundfile's, the rest ffmpeg's; `decode_file` takes all from ffmpeg).
    `stopped` gets what ffmpeg said where it gave up part-way (`AudioInfo.stopped` of `decode_file`). With `keep`, a
    multichannel file's pieces are (frames, 1 + channels): the mix (as without), then each channel."""
    done = 0
    try:
        with _soundfile_handle(path, suffix) as handle:
            resampled = _Resampled(int(handle.samplerate), 0, int(handle.channels) if keep else 0)
            for block in handle.blocks(blocksize=BLOCK_FRAMES, dtype="float32", always_2d=True):
                for piece in resampled.pieces(block):
                    done += len(piece)
                    yield piece
            yield from resampled.pieces(None)
    except DecodeError:  # decoded, but not to finite samples: no other decoder will do better
        raise
    except Exception as soundfile_error:
        with _ffmpeg_fallback(path, soundfile_error) as stream:
            resampled = _Resampled(stream.info.sample_rate, 0, stream.info.channels if keep else 0)
            for block in stream:
                for piece in resampled.pieces(block):
                    if len(piece) <= done:  # soundfile's samples of the same stretch were given already
                        done -= len(piece)
                        continue
                    yield piece[done:]
                    done = 0
            yield from resampled.pieces(None)
            if stream.stopped and stopped is not None:
                stopped.append(stream.stopped)


def decode(data: bytes, suffix: str) -> tuple[np.ndarray, AudioInfo]:
    """`decode_file` for bytes in memory (tests, tools); the pipeline decodes the staged file itself."""
    with _with_tempfile(data, suffix) as tmp:
        return decode_file(tmp.name, suffix)


def suffix_of(path: str) -> str:
    return pathlib.PurePosixPath(path).suffix.lower()
