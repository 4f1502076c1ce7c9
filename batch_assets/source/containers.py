"""What a container's first bytes say about its length: whether it states one the readers can trust.

Why: a recorder writing to a pipe or a live stream cannot go back to its header, so the length there is absent or
an estimate: a FLAC without a sample count in STREAMINFO (libsndfile then reports an unknown length, `UNKNOWN`), an
MP3 without a Xing, Info or VBRI frame (its length is guessed from the first frame's bitrate: a VBR stream decodes
to twice its guess, and libsndfile's decode stops at the guess), a fragmented MP4 (an empty `moov`). The listing
(`source/header_probe.py`) records such a length as estimated, and the GPU step's decoder (`source/decode.py`)
decodes those streams to their end with ffmpeg. An ID3v2 tag (cover art: often hundreds of KiB) is skipped by its
stated size, never read. `AudioInfo` is what a reader says of a stream (its format and length, and whether that
length is only an estimate), `DecodeError` why it found no audio. No Dagster.
"""

from __future__ import annotations

import dataclasses


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


# libsndfile's frame count for a stream whose length it does not know (SF_COUNT_MAX; anything near it)
UNKNOWN = 2**62
_LENGTH_FRAMES = (b"Xing", b"Info", b"VBRI")
MP3_SCAN = 4096  # bytes after the tag searched for the first frame and its length frame


def id3v2_size(head: bytes) -> int:
    """Bytes an ID3v2 tag at the start takes (header, body, footer), from its first 10 bytes; 0 when there is none."""
    if len(head) < 10 or head[:3] != b"ID3" or any(b & 0x80 for b in head[6:10]):
        return 0
    body = (head[6] << 21) | (head[7] << 14) | (head[8] << 7) | head[9]
    return 10 + body + (10 if head[5] & 0x10 else 0)


def mp3_states_its_length(after_tag: bytes) -> bool:
    """Whether the first MPEG audio frame in these bytes (what follows any ID3v2 tag) is a Xing, Info or VBRI frame:
    a frame count the length can be read from."""
    for offset in range(max(0, len(after_tag) - 4)):
        if after_tag[offset] == 0xFF and after_tag[offset + 1] & 0xE0 == 0xE0:
            frame = after_tag[offset : offset + 200]
            return any(tag in frame for tag in _LENGTH_FRAMES)
    return False
