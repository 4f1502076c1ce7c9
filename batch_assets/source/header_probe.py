"""Rate, channels and length of an audio object from ranged reads of its head (and tail), never its whole body.

Why: listing a partition (`ingest/manifest.py`) must not download it; the GPU steps read each object once, to decode
it (`source/flight_audio.py`). `RangedFile` is a seekable, read-only file over ranged reads (`read_range(start,
end)`: one GET with a Range on S3, a `pread` locally) in aligned blocks of `BLOCK` (8 KiB), each block read at most
once, every byte counted; the last `tail` bytes are one block of their own. The probe reads what each container asks
for, and no more:

- An ID3v2 tag at the head (an MP3's cover art) is skipped by the size its first 10 bytes state: the probe goes on
  at the tag's end, never reading the tag.
- WAV, FLAC, Ogg (Vorbis, Opus), MP3: libsndfile (`soundfile.info`) over the `RangedFile`. WAV and FLAC keep the
  length in the header (one block); Ogg keeps it in the last page's granule position, which libsndfile looks for in
  the last 64 KiB (a head block and one tail read of `OGG_TAIL`); MP3's length is the Xing/Info/VBRI frame count at
  the head (what LAME and ffmpeg write; one block). A FLAC without a sample count (written to a pipe) and an MP3
  without a length frame state no length (`source/containers.py`): ffmpeg's estimate below, recorded as estimated.
  libsndfile may read at most `PROBE_LIMIT` before the estimate takes over.
- MP4/M4A/M4V/MOV/3GP: its boxes (`_mp4_info`): each top-level box's header is one small read until `moov`, whose
  `mdhd`, `hdlr` and sample entry give the first audio track's length, rate and channels (a video track is passed
  over). `moov` holds a table per sample (about 10 KiB per audio-minute of AAC), and the parser reads only the
  headers of the boxes it walks, never those tables: a few reads, each within a block, wherever `moov` sits (first,
  or last after `mdat`). A fragmented MP4 (a live recording: an empty `moov`, the samples in fragments) states no
  length: ffmpeg's estimate.
- Anything else (WebM/MKA, AMR, raw AAC, WMA, CAF) and whatever libsndfile cannot read from its blocks: ffmpeg on a
  sparse local copy holding only the head and the tail block (`_ffmpeg_estimate`; 4 and then 16 times larger when
  ffmpeg finds no audio stream in them), which is what ffmpeg itself reads to report a duration for most
  containers. Its length is recorded as estimated where ffmpeg estimated it from the bitrate, or stated none (a
  live WebM or MKA: the size over the stream's bitrate, `decode.parse_ffmpeg_header`).

A listed duration is what planning uses; the GPU step decodes the object to the end of its stream and uses what
decoded (a unit whose decoded length differs is processed as decoded, with a reason: `source/flight_audio.py`; an
estimated length is never taken for a truncation). No Dagster.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import struct
import subprocess
import tempfile
from collections.abc import Callable

import soundfile as sf

from batch_assets.source.containers import UNKNOWN, AudioInfo, DecodeError, id3v2_size, mp3_states_its_length
from batch_assets.source.ffmpeg import ffmpeg_exe, parse_ffmpeg_header

BLOCK = 8 * 1024  # bytes a read, aligned
OGG_TAIL = 64 * 1024  # an Ogg's tail, one read: libsndfile looks for the last page this far back
PROBE_LIMIT = 256 * 1024  # most bytes libsndfile may read of one object while probing before the estimate takes over


class ProbeLimit(Exception):
    """The reader went past its byte limit (a container whose length needs its body scanned)."""


class RangedFile(io.RawIOBase):
    """A seekable read-only file of `size` bytes over `read_range(start, end)`, read in aligned `block`s (the last
    `tail` bytes one block: `block` unless set), each at most once (cached), `limit` bytes at most (then
    `ProbeLimit`). `bytes_read` and `reads` count what was read."""

    def __init__(self, size: int, read_range: Callable[[int, int], bytes], block: int = BLOCK,
                 limit: int | None = None, tail: int | None = None):
        self.size, self.read_range, self.block, self.limit = size, read_range, block, limit
        self.tail = tail or block
        self.position, self.blocks, self.bytes_read, self.reads, self.exceeded = 0, {}, 0, 0, False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def _span(self, offset: int) -> tuple[int, int]:
        """The block holding `offset`: aligned from the start, but the last `tail` bytes are one block of their own
        (a container's tail, such as Ogg's last page, is one read, not several)."""
        tail = max(0, self.size - self.tail)
        if offset >= tail:
            return tail, self.size
        start = offset // self.block * self.block
        return start, min(start + self.block, tail)

    def _block(self, span: tuple[int, int]) -> bytes:
        if span not in self.blocks:
            start, end = span
            if self.limit is not None and self.bytes_read + (end - start) > self.limit:
                self.exceeded = True  # libsndfile swallows an exception raised in its read callback: say it here too
                raise ProbeLimit(f"more than {self.limit} bytes needed to read the header")
            data = self.read_range(start, end) if end > start else b""
            self.bytes_read, self.reads = self.bytes_read + len(data), self.reads + 1
            self.blocks[span] = data
        return self.blocks[span]

    def pread(self, offset: int, count: int) -> bytes:
        """`count` bytes at `offset` (fewer at the end), leaving the position alone."""
        out, end = bytearray(), min(self.size, offset + count)
        while offset < end:
            span = self._span(offset)
            data = self._block(span)
            piece = data[offset - span[0] : offset - span[0] + (end - offset)]
            if not piece:
                break
            out += piece
            offset += len(piece)
        return bytes(out)

    def readinto(self, buffer) -> int:
        data = self.pread(self.position, len(buffer))
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def _soundfile_info(handle: RangedFile) -> AudioInfo:
    handle.seek(0)
    info = sf.info(handle)
    if handle.exceeded:  # libsndfile read past the limit and went on with what it had: its length is not to be trusted
        raise ProbeLimit(f"more than {handle.limit} bytes needed to read the header")
    return AudioInfo(int(info.samplerate), int(info.channels), int(info.frames))


# -- MP4 / M4A ----------------------------------------------------------------------------------------------------

_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl"}


def _boxes(handle: RangedFile, start: int, end: int):
    """(type, payload start, box end) of each box in [start, end), reading only box headers."""
    while start + 8 <= end:
        size, kind = struct.unpack(">I4s", handle.pread(start, 8))
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", handle.pread(start + 8, 8))[0], 16
        elif size == 0:
            size = end - start
        if size < header:
            raise DecodeError(f"MP4 box {kind!r} at {start} has an impossible size {size}")
        yield kind, start + header, min(end, start + size)
        start += size


def _mp4_info(handle: RangedFile) -> AudioInfo:
    """Length, rate and channels of an MP4's first audio track, from `moov`'s headers (not its sample tables)."""
    if handle.pread(4, 4) != b"ftyp":
        raise DecodeError("not an MP4 file (no ftyp box)")
    found: dict[str, int] = {}

    def walk(start: int, end: int, parent: bytes) -> None:
        for kind, payload, box_end in _boxes(handle, start, end):
            if kind == b"trak" and "rate" in found:
                return  # the first audio track is enough
            if kind in _CONTAINERS:
                walk(payload, box_end, kind)
            elif kind == b"mdhd":
                data = handle.pread(payload, 32)
                if data[0] == 1:
                    timescale, duration = struct.unpack(">IQ", data[20:32])
                else:
                    timescale, duration = struct.unpack(">II", data[12:20])
                found["timescale"], found["duration"] = timescale, duration
            elif kind == b"hdlr" and parent == b"mdia":  # the track's kind (QuickTime's minf has a data handler too)
                found["audio"] = handle.pread(payload + 8, 4) == b"soun"
            elif kind == b"stsd" and found.get("audio"):
                entry = handle.pread(payload + 8, 36)  # the first sample entry: size, format, ..., channels, rate
                channels = struct.unpack(">H", entry[24:26])[0]
                rate = struct.unpack(">I", entry[32:36])[0] >> 16
                found["rate"], found["channels"] = rate, channels
                found["frames"] = round(found["duration"] * rate / found["timescale"]) if found["timescale"] else 0

    for kind, payload, box_end in _boxes(handle, 0, handle.size):
        if kind == b"moov":
            walk(payload, box_end, kind)
            break
    if "rate" not in found or not found["rate"]:
        raise DecodeError("MP4 file without an audio track header (moov: mdhd, hdlr soun, stsd)")
    return AudioInfo(found["rate"], found["channels"], found["frames"])


def _ffmpeg_estimate(handle: RangedFile, suffix: str, by_size: bool = False) -> AudioInfo:
    """What ffmpeg reports of a sparse copy holding only the object's head and tail (a block each; larger spans when
    ffmpeg finds no audio stream in them)."""
    for span in (handle.block, 4 * handle.block, 16 * handle.block):
        with tempfile.TemporaryDirectory(prefix="probe-") as scratch:
            path = os.path.join(scratch, f"head_tail{suffix}")
            with open(path, "wb") as sparse:
                sparse.truncate(handle.size)
                for offset in sorted({0, max(0, handle.size - span)}):
                    sparse.seek(offset)
                    sparse.write(handle.pread(offset, span))
            result = subprocess.run([ffmpeg_exe(), "-hide_banner", "-i", path], capture_output=True, text=True)
        try:
            return parse_ffmpeg_header(result.stderr, handle.size, by_size)
        except DecodeError:
            if span >= handle.size:
                raise
    raise DecodeError(f"ffmpeg found no audio stream in the first and last {span} bytes")


class _After(RangedFile):
    """The bytes of `outer` from `origin` on, as a file of their own (what follows an ID3v2 tag)."""

    def __init__(self, outer: RangedFile, origin: int):
        super().__init__(outer.size - origin, lambda start, end: outer.pread(origin + start, end - start),
                         outer.block, outer.limit, outer.tail)


# what a header that does not parse raises in the parsers here (a box cut short, an impossible size): not retried
_HEADER_ERRORS = (struct.error, ValueError, KeyError, IndexError, ZeroDivisionError, OverflowError)


def probe_object(handle: RangedFile, suffix: str) -> AudioInfo:
    """Rate, channels and frames of the object behind `handle` (its `bytes_read` then says what the probe cost,
    whether or not it found a header); `DecodeError` when no reader finds an audio header in its head and tail, or
    the header it finds does not parse (storage errors propagate, to be retried)."""
    try:
        return _probe(handle, suffix)
    except _HEADER_ERRORS as error:
        raise DecodeError(f"an audio header that does not parse ({type(error).__name__}: {str(error)[:120]})") from None


def _probe(handle: RangedFile, suffix: str) -> AudioInfo:
    if suffix in (".ogg", ".opus"):  # its length is in its last page: one read of the tail libsndfile searches
        handle.tail = max(handle.tail, OGG_TAIL)
    if handle.pread(4, 4) == b"ftyp":
        info = _mp4_info(handle)
        return info if info.frames else _stated_none(handle, suffix)  # fragmented: the length is in fragments
    tag = id3v2_size(handle.pread(0, 10))
    body = _After(handle, tag) if tag else handle
    budgeted = RangedFile(body.size, lambda start, end: _cached(body, start, end), handle.block, PROBE_LIMIT,
                          handle.tail)
    try:
        info = _soundfile_info(budgeted)
    except Exception as soundfile_error:  # libsndfile cannot read it from its head (or needed more): ask ffmpeg
        try:
            return _ffmpeg_estimate(handle, suffix)
        except DecodeError as ffmpeg_error:
            said = re.sub(r"<[^>]* at 0x[0-9a-f]+>", "its head", str(soundfile_error))  # no object address
            raise DecodeError(f"{ffmpeg_error} (soundfile: {said[:120]})") from None
    if info.frames >= UNKNOWN or (suffix == ".mp3" and not mp3_states_its_length(body.pread(0, 4096))):
        return _stated_none(handle, suffix)  # a FLAC from a pipe, an MP3 without Xing
    return info


def _stated_none(handle: RangedFile, suffix: str) -> AudioInfo:
    """An object whose container states no length: its size over the stream's bitrate (ffmpeg's duration of a
    fragmented MP4 is its first fragment's), estimated."""
    return dataclasses.replace(_ffmpeg_estimate(handle, suffix, by_size=True), estimated=True)


def _cached(handle: RangedFile, start: int, end: int) -> bytes:
    """The bytes [start, end) through `handle`'s block cache (one count, one read per block)."""
    return handle.pread(start, end - start)


def probe(data: bytes, suffix: str) -> AudioInfo:
    """`probe_object` for bytes in memory (tests, tools)."""
    return probe_object(RangedFile(len(data), lambda start, end: data[start:end]), suffix)
