"""Rate, channels and length of an audio object from ranged reads of its head (and tail), never its whole body.

Why: listing a partition (`ingest/manifest.py`) must not download it; the GPU steps read each object once, to
decode it (`ingest/stream.py`). `RangedFile` is a seekable, read-only file over ranged reads (`read_range(start,
end)`: one GET with a Range on S3, a `pread` locally) in aligned blocks of `BLOCK` (64 KiB), each block read at
most once, every byte counted. The probe hands it to what knows each container:

- WAV, FLAC, Ogg (Vorbis, Opus), MP3: libsndfile (`soundfile.info`) over the `RangedFile`. WAV and FLAC keep the
  length in the header (one read); Ogg keeps it in the last page's granule position, which libsndfile seeks to the
  end for (a head and a tail read); MP3's length is the Xing/Info frame count at the head (what LAME and ffmpeg
  write; a stream without it is measured by libsndfile's frame scan, which can read the body: `PROBE_LIMIT`
  stops that and the object falls through to the estimate below).
- MP4/M4A (AAC, ALAC): its boxes (`_mp4_info`): each top-level box's header is one small read until `moov`, whose
  `mvhd`, `mdhd` and sample entry give the length, rate and channels. `moov` holds a table per sample (about 10 KiB
  per audio-minute of AAC), and the parser reads only the headers of the boxes it walks, never those tables: a few
  reads, each within a block, wherever `moov` sits (first, or last after `mdat`).
- Anything else libsndfile cannot read from those blocks: ffmpeg on a sparse local copy holding only the head and
  the tail blocks (`_ffmpeg_estimate`), which is what ffmpeg itself reads to report a duration for most containers
  (for a constant-bitrate stream without a length field, an estimate from the bitrate).

A listed duration is what planning uses; the GPU step decodes the object and uses what decoded (a unit whose
decoded length differs is processed as decoded, with a reason: `ingest/stream.py`). No Dagster.
"""

from __future__ import annotations

import io
import os
import re
import struct
import subprocess
import tempfile
from collections.abc import Callable

import soundfile as sf

from batch_assets.audio.decode import AudioInfo, DecodeError, ffmpeg_exe, parse_ffmpeg_header

BLOCK = 64 * 1024  # bytes a read, aligned
PROBE_LIMIT = 4 * BLOCK  # most bytes libsndfile may read of one object while probing before the estimate takes over


class ProbeLimit(Exception):
    """The reader went past its byte limit (a container whose length needs its body scanned)."""


class RangedFile(io.RawIOBase):
    """A seekable read-only file of `size` bytes over `read_range(start, end)`, read in aligned `block`s, each at
    most once (cached), `limit` bytes at most (then `ProbeLimit`). `bytes_read` and `reads` count what was read."""

    def __init__(self, size: int, read_range: Callable[[int, int], bytes], block: int = BLOCK,
                 limit: int | None = None):
        self.size, self.read_range, self.block, self.limit = size, read_range, block, limit
        self.position, self.blocks, self.bytes_read, self.reads = 0, {}, 0, 0

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
        """The block holding `offset`: aligned from the start, but the last `block` bytes are one block of their own
        (a container's tail, such as Ogg's last page, is one read, not two)."""
        tail = max(0, self.size - self.block)
        if offset >= tail:
            return tail, self.size
        start = offset // self.block * self.block
        return start, min(start + self.block, tail)

    def _block(self, span: tuple[int, int]) -> bytes:
        if span not in self.blocks:
            start, end = span
            if self.limit is not None and self.bytes_read + (end - start) > self.limit:
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

    def walk(start: int, end: int, in_audio: bool) -> None:
        for kind, payload, box_end in _boxes(handle, start, end):
            if kind == b"trak" and "rate" in found:
                return  # the first audio track is enough
            if kind in _CONTAINERS:
                walk(payload, box_end, in_audio)
            elif kind == b"mdhd":
                data = handle.pread(payload, 32)
                if data[0] == 1:
                    timescale, duration = struct.unpack(">IQ", data[20:32])
                else:
                    timescale, duration = struct.unpack(">II", data[12:20])
                found["timescale"], found["duration"] = timescale, duration
            elif kind == b"hdlr":
                found["audio"] = handle.pread(payload + 8, 4) == b"soun"
            elif kind == b"stsd" and found.get("audio"):
                entry = handle.pread(payload + 8, 36)  # the first sample entry: size, format, ..., channels, rate
                channels = struct.unpack(">H", entry[24:26])[0]
                rate = struct.unpack(">I", entry[32:36])[0] >> 16
                found["rate"], found["channels"] = rate, channels
                found["frames"] = round(found["duration"] * rate / found["timescale"]) if found["timescale"] else 0

    for kind, payload, box_end in _boxes(handle, 0, handle.size):
        if kind == b"moov":
            walk(payload, box_end, False)
            break
    if "rate" not in found or not found["rate"]:
        raise DecodeError("MP4 file without an audio track header (moov: mdhd, hdlr soun, stsd)")
    return AudioInfo(found["rate"], found["channels"], found["frames"])


def _ffmpeg_estimate(handle: RangedFile, suffix: str) -> AudioInfo:
    """What ffmpeg reports of a sparse copy holding only the object's head and tail blocks."""
    with tempfile.TemporaryDirectory(prefix="probe-") as scratch:
        path = os.path.join(scratch, f"head_tail{suffix}")
        with open(path, "wb") as sparse:
            sparse.truncate(handle.size)
            for offset in sorted({0, max(0, handle.size - handle.block)}):
                sparse.seek(offset)
                sparse.write(handle.pread(offset, handle.block))
        result = subprocess.run([ffmpeg_exe(), "-hide_banner", "-i", path], capture_output=True, text=True)
    return parse_ffmpeg_header(result.stderr)


def probe_object(handle: RangedFile, suffix: str) -> AudioInfo:
    """Rate, channels and frames of the object behind `handle` (its `bytes_read` then says what the probe cost,
    whether or not it found a header); `DecodeError` when no reader finds an audio header in its head and tail."""
    if handle.pread(4, 4) == b"ftyp":
        return _mp4_info(handle)
    budgeted = RangedFile(handle.size, lambda start, end: _cached(handle, start, end), limit=PROBE_LIMIT)
    try:
        return _soundfile_info(budgeted)
    except Exception as soundfile_error:  # libsndfile cannot read it from its head (or needed more): ask ffmpeg
        try:
            return _ffmpeg_estimate(handle, suffix)
        except DecodeError as ffmpeg_error:
            said = re.sub(r"<[^>]* at 0x[0-9a-f]+>", "its head", str(soundfile_error))  # no object address
            raise DecodeError(f"{ffmpeg_error} (soundfile: {said[:120]})") from None


def _cached(handle: RangedFile, start: int, end: int) -> bytes:
    """The bytes [start, end) through `handle`'s block cache (one count, one read per block)."""
    return handle.pread(start, end - start)


def probe(data: bytes, suffix: str) -> AudioInfo:
    """`probe_object` for bytes in memory (tests, tools)."""
    return probe_object(RangedFile(len(data), lambda start, end: data[start:end]), suffix)
