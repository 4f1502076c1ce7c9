"""A day of the files recorders, phones, browsers and meeting tools write, all made from one dialogue (issue 64).

Each is encoded by the ffmpeg `imageio-ffmpeg` ships, as its writer does: to a pipe where the writer streams
(no length in the header: a piped FLAC and WAV, a live WebM and MKA, a fragmented MP4), a VBR MP3 without a Xing
frame, an MP3 with about 150 KiB of cover art in its ID3v2 tag, video with an AAC track (a meeting recording, a screen
capture), AMR from a phone, raw ADTS AAC, WMA, CAF, Opus in Ogg. `ENCODINGS` gives the ffmpeg arguments and
whether the output goes to a pipe; `write_recorder_day` writes them and the dialogue itself (`dialogue.wav`).
"""

from __future__ import annotations

import pathlib
import subprocess

from batch_assets.source.ffmpeg import ffmpeg_exe

DIALOGUE = pathlib.Path(__file__).resolve().parents[1] / "sample_data" / "audio" / "2026-01-15" / "meetings" / \
    "standup.wav"
_VIDEO = ["-f", "lavfi", "-i", "color=c=gray:s=64x48:r=5"]
_AUDIO_AND_VIDEO = ["-map", "0:v", "-map", "1:a", "-shortest", "-c:v", "libx264", "-c:a", "aac", "-b:a", "64k"]

# name -> (ffmpeg arguments after the dialogue's input, output format, written to a pipe, a video input first)
ENCODINGS: dict[str, tuple[list[str], str, bool, bool]] = {
    "recorder/piped.flac": (["-c:a", "flac"], "flac", True, False),
    "recorder/piped.wav": (["-c:a", "pcm_s16le"], "wav", True, False),
    "recorder/field.wma": (["-c:a", "wmav2", "-b:a", "64k"], "asf", False, False),
    "recorder/dictation.caf": (["-c:a", "pcm_s16le"], "caf", False, False),
    "phone/voice_memo.m4a": (["-c:a", "aac", "-b:a", "64k"], "ipod", False, False),
    # 2 s fragments, as live recorders write them (ffmpeg's frag_keyframe on audio alone writes 300 s it cannot read)
    "phone/live.m4a": (["-c:a", "aac", "-b:a", "64k", "-movflags", "empty_moov+default_base_moof", "-frag_duration",
                        "2000000"], "mp4", True, False),
    "phone/call.amr": (["-ar", "8000", "-c:a", "libopencore_amrnb", "-b:a", "12.2k"], "amr", False, False),
    "phone/call.3gp": (["-ar", "8000", "-c:a", "libopencore_amrnb", "-b:a", "12.2k"], "3gp", False, False),
    "phone/stream.aac": (["-c:a", "aac", "-b:a", "64k"], "adts", False, False),
    "browser/recording.webm": (["-c:a", "libopus", "-b:a", "32k"], "webm", True, False),
    "browser/voice_note.opus": (["-c:a", "libopus", "-b:a", "24k"], "ogg", False, False),
    "browser/recording.mka": (["-c:a", "libvorbis", "-q:a", "3"], "matroska", True, False),
    "meetings/meeting.mp4": (_AUDIO_AND_VIDEO, "mp4", False, True),
    "meetings/screen.mov": (_AUDIO_AND_VIDEO, "mov", False, True),
    "podcast/vbr_no_xing.mp3": (["-c:a", "libmp3lame", "-q:a", "6", "-write_xing", "0"], "mp3", False, False),
}
COVER_ART = "podcast/cover_art.mp3"  # an MP3 behind a 150 KiB ID3v2 tag (APIC)


def _encode(target: pathlib.Path, inputs: list[str], args: list[str], fmt: str, piped: bool) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    command = [ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-y", *inputs, *args, "-f", fmt]
    if piped:  # the writer cannot seek back to its header
        with open(target, "wb") as handle:
            subprocess.run([*command, "pipe:1"], stdout=handle, check=True)
    else:
        subprocess.run([*command, str(target)], check=True)


def write_recorder_day(folder: pathlib.Path, seconds: float | None = None) -> dict[str, pathlib.Path]:
    """Every encoding of the dialogue's first `seconds` (all of it: None; longer: the dialogue looped) under `folder`,
    plus `dialogue.wav` (16 kHz PCM); returns relative key -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    cut = [] if seconds is None else ["-t", f"{seconds}"]
    dialogue = folder / "dialogue.wav"
    _encode(dialogue, ["-stream_loop", "-1", "-i", str(DIALOGUE)] if cut else ["-i", str(DIALOGUE)],
            [*cut, "-c:a", "pcm_s16le"], "wav", False)
    written = {"dialogue.wav": dialogue}
    for name, (args, fmt, piped, video) in ENCODINGS.items():
        inputs = [*_VIDEO, "-i", str(dialogue)] if video else ["-i", str(dialogue)]
        _encode(folder / name, inputs, args, fmt, piped)
        written[name] = folder / name
    cover = folder / "cover.png"  # noise compresses badly: a large picture
    _encode(cover, ["-f", "lavfi", "-i", "nullsrc=s=320x320,geq=random(1)*255:128:128"], ["-frames:v", "1"],
            "image2", False)
    _encode(folder / COVER_ART, ["-i", str(dialogue), "-i", str(cover)],
            ["-map", "0:a", "-map", "1:v", "-c:a", "libmp3lame", "-b:a", "32k", "-c:v", "copy", "-id3v2_version", "3",
             "-metadata:s:v", "comment=Cover (front)"], "mp3", False)
    cover.unlink()
    written[COVER_ART] = folder / COVER_ART
    return written
