"""The files users have (issue 64): recorders', phones', browsers' and meeting tools' encodings of one dialogue
(`recorder_files.py`), listed from their headers and decoded as the GPU step decodes them.

Before issue 64, of 15 such files 8 came through whole: a FLAC written to a pipe was `too_long` (576460752303423.5
s), a fragmented M4A `empty`, a VBR MP3 without a Xing frame cut at its first frame's guess (about half), and MP4,
MOV, WebM, MKA, AMR, 3GP, raw AAC, WMA and CAF were not listed as audio.
"""

from __future__ import annotations

import statistics

import numpy as np
import polars as pl
import pytest
from fsspec.implementations.local import LocalFileSystem

from batch_assets.ingest.manifest import build_manifest
from batch_assets.ingest.prepare import prepare_flights
from batch_assets.source.containers import id3v2_size
from batch_assets.source.decode import TARGET_SAMPLE_RATE, decode_file
from batch_assets.source.flight_audio import flight_source
from batch_assets.storage.resource import StorageResource

from .recorder_files import COVER_ART, ENCODINGS, write_recorder_day

SECONDS = 6.0
# what states no length its readers can trust: a pipe's FLAC, a live MP4, WebM and MKA, an MP3 without Xing
STATES_NO_LENGTH = {"recorder/piped.flac", "phone/live.m4a", "browser/recording.webm", "browser/recording.mka",
                    "podcast/vbr_no_xing.mp3"}
LOSSLESS = ("recorder/piped.flac", "recorder/piped.wav", "recorder/dictation.caf")


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recorders") / "2026-03-01"
    written = write_recorder_day(folder, SECONDS)
    manifest, skipped = build_manifest(LocalFileSystem(), str(folder), 7200.0, 4)
    plan, flights = prepare_flights(manifest, budget_s=1800.0, max_units=32)
    source = flight_source(plan, manifest, StorageResource().filesystem, 4)
    keys = dict(zip(manifest["unit_id"], manifest["relative_key"], strict=True))
    pieces, audio = {}, {}
    for flight_id in flights["flight_id"]:
        flight = source.load(flight_id)
        for uid, piece in flight.pieces.items():
            pieces[keys[uid]] = piece
            audio[keys[uid]] = flight.audio[piece.offset_samples : piece.offset_samples + piece.num_samples]
    return written, manifest, skipped, pieces, audio


def test_every_file_is_listed_as_audio_with_its_length_or_an_estimate(day):
    written, manifest, skipped, _, _ = day
    assert skipped.is_empty() and sorted(manifest["relative_key"]) == sorted(written)
    assert set(manifest["result_class"]) == {"ok"}, manifest.filter(pl.col("result_class") != "ok")
    rows = {row["relative_key"]: row for row in manifest.iter_rows(named=True)}
    estimated = {key for key, row in rows.items() if row["duration_estimated"]}
    assert STATES_NO_LENGTH <= estimated, estimated
    for key, row in rows.items():  # an estimate is in the right range; a stated length is the length
        assert abs(row["duration_s"] - SECONDS) < (0.6 * SECONDS if key in estimated else 0.1), (key, row)
        assert row["sample_rate"] in (8000, 16000, 48000) and row["channels"] == 1, row
    assert {key for key in ENCODINGS if ENCODINGS[key][3]} <= set(rows)  # video files: their audio track


def test_every_file_decodes_whole_to_the_end_of_its_stream(day):
    """Each decodes to what it holds (the dialogue's 6 s; AAC and AMR add a frame of priming), whatever its header
    stated or estimated, with nothing to say: an estimate is never taken for a truncation."""
    _, _, _, pieces, audio = day
    for key, piece in pieces.items():
        assert piece.problem is None and not piece.truncated and piece.note == "", (key, piece)
        assert abs(piece.num_samples / TARGET_SAMPLE_RATE - SECONDS) < 0.15, (key, piece.num_samples)
    reference = audio["dialogue.wav"]
    for key in LOSSLESS:  # a lossless copy decodes to the dialogue's samples
        assert np.allclose(audio[key], reference, atol=1e-6), key
    def envelope(samples: np.ndarray) -> np.ndarray:  # RMS per 20 ms: what a codec keeps of speech's rhythm
        frames = samples[: len(samples) // 320 * 320].reshape(-1, 320)
        return np.sqrt((frames**2).mean(axis=1))

    for key, samples in audio.items():  # and a lossy one to a signal that follows it
        mine, theirs = envelope(samples), envelope(reference)
        n = min(len(mine), len(theirs)) - 5
        best = max(np.corrcoef(mine[max(lag, 0) : max(lag, 0) + n], theirs[max(-lag, 0) : max(-lag, 0) + n])[0, 1]
                   for lag in range(-5, 6))  # a codec's delay, or the priming it dropped (WMA: 16 ms)
        assert best > 0.9, (key, best)


def test_header_reads_are_sized_to_what_the_format_asks(day):
    """Issue 64: header reads were fixed at 64 KiB (head, and tail where the format keeps its length there). Now a
    WAV costs one 8 KiB block, and an MP3 behind a large ID3v2 tag is read past the tag, not through it."""
    written, manifest, _, pieces, _ = day
    probed = dict(zip(manifest["relative_key"], manifest["probe_bytes"], strict=True))
    assert probed["dialogue.wav"] == 8192 and probed["recorder/piped.wav"] == 8192
    tag = id3v2_size(written[COVER_ART].read_bytes()[:10])
    assert tag > 100_000 and probed[COVER_ART] < tag / 2, (tag, probed[COVER_ART])
    assert statistics.median(probed.values()) <= 16384, probed
    decoded, _ = decode_file(str(written[COVER_ART]), ".mp3")
    assert abs(len(decoded) / TARGET_SAMPLE_RATE - SECONDS) < 0.1 and pieces[COVER_ART].problem is None


def test_a_header_that_does_not_parse_is_undecodable_at_once_and_an_estimate_leaves_video_out(tmp_path):
    """An MP4 whose box header runs past the end (a 64-bit size cut off) raised `struct.error`, which the listing
    retried as a storage error for 3.5 s and classed `fetch_failed` (unread: read again, forever). A WebM with
    video and no stated length was estimated from its whole size at an audio bitrate: an hour of screen recording
    listed as 78 hours (`too_long`)."""
    import time

    from batch_assets.source.containers import DecodeError
    from batch_assets.source.ffmpeg import parse_ffmpeg_header
    from batch_assets.source.header_probe import probe

    cut = b"\x00\x00\x00\x10ftypM4A \x00\x00\x00\x00" + b"\x00\x00\x00\x01moov\x00\x00"
    with pytest.raises(DecodeError, match="does not parse"):
        probe(cut, ".m4a")
    day = tmp_path / "2026-03-01"
    day.mkdir()
    (day / "cut.m4a").write_bytes(cut)
    started = time.perf_counter()
    manifest, _ = build_manifest(LocalFileSystem(), str(day), 7200.0, 1)
    assert manifest["result_class"].to_list() == ["undecodable"] and time.perf_counter() - started < 2.0
    live = ("Input #0, matroska,webm, from 'x.webm':\n  Duration: N/A, start: 0.000000, bitrate: N/A\n"
            "  Stream #0:0: Video: vp8, yuv420p(tv), 1280x720, 30 fps\n"
            "  Stream #0:1: Audio: opus, 48000 Hz, mono, fltp\n")
    hour = parse_ffmpeg_header(live, 1_100_000_000)  # an hour of video at ~2.4 Mb/s beside its voice
    assert hour.estimated and 1.0 < hour.duration_s / 3600 < 10.0, hour.duration_s / 3600
    stated = parse_ffmpeg_header(live.replace("bitrate: N/A", "bitrate: 2444 kb/s"), 1_100_000_000)
    assert abs(stated.duration_s - 3600) < 5, stated.duration_s  # a container bitrate, where one is stated


@pytest.mark.e2e  # a partition run, its checks included
def test_a_day_of_recorder_phone_browser_and_meeting_files_on_a_versioned_bucket_is_transcribed(tmp_path, lock_dir):
    """Issue 64: the day above on an S3 bucket with versioning on, all six assets and their checks (0 of 15 came
    through before: every unit changed_since_listed; 8 of 15 on an unversioned bucket). Every file is
    `transcribed`, its duration within 1 s of what it holds, its words as close to the dialogue's own as its codec
    allows (the same run's transcript of `dialogue.wav`, the lossless original). In process (Dagster's in-process
    executor), 19 s here against 33 s through `batch-assets run`: what is tested is the objects and their reads; the
    deployed configuration's runs read a versioned bucket too (tests/deployments.py)."""
    import json

    import jiwer

    from batch_assets.orchestration.io_manager import StorageJsonIOManager

    from .conftest import make_resources, materialize_partition
    from .s3_server import S3Server

    folder = tmp_path / "day"
    write_recorder_day(folder, SECONDS)
    with S3Server() as s3:
        client = s3.bucket("recorders", "Enabled")
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            client.upload_file(str(path), "recorders", f"audio/2026-03-01/{path.relative_to(folder).as_posix()}")
        storage = s3.storage("recorders", source="audio")
        resources = make_resources(tmp_path / "unused", lock_dir) | {
            "storage": storage, "gpu_io": StorageJsonIOManager(storage=storage)}
        result = materialize_partition(resources, "2026-03-01", raise_on_error=False)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        units = storage.read_parquet("transcripts", "2026-03-01", "units")
    failed = [(e.check_name, e.metadata) for e in result.get_asset_check_evaluations() if not e.passed]
    assert not failed, failed
    rows = {row["source_uri"].split("/2026-03-01/", 1)[1]: row for row in units.iter_rows(named=True)}
    assert sorted(rows) == sorted([*ENCODINGS, COVER_ART, "dialogue.wav"])
    reference = rows["dialogue.wav"]["text"]
    errors = {}
    for key, row in rows.items():
        assert row["result_class"] == "transcribed", (key, row["result_class"], row["reason"])
        assert abs(row["duration_s"] - SECONDS) < 1.0, (key, row["duration_s"])
        errors[key] = jiwer.wer(reference, row["text"] or "-")
    print("word error against the dialogue's own transcript:", json.dumps(errors, sort_keys=True))
    # 8 kHz AMR at 12.2 kb/s, a telephone's band: the builtin models heard only 16 kHz synthetic speech in training
    # (measured: 0.69 and 0.77; every other file 0 to 0.15)
    narrowband = {"phone/call.amr", "phone/call.3gp"}
    assert all(errors[key] <= 0.25 for key in rows if key not in narrowband), errors
    assert all(errors[key] <= 0.85 for key in narrowband), errors


@pytest.mark.slow  # 300 s of AAC encoded
def test_a_stream_the_decoder_gives_up_on_keeps_what_decoded_and_says_so(tmp_path):
    """A fragmented M4A that ffmpeg writes (audio alone, a fragment per key frame, 300 s, to a pipe) and then cannot
    decode past its first frames (exit 69, "Reserved bit set"): before, the unit was `undecodable` whatever had
    decoded; an estimated length made it worse, as nothing compares. Now what decoded is kept, and the unit is
    `truncated` with ffmpeg's words, as a cut-off file is."""
    from batch_assets.source.ffmpeg import ffmpeg_exe

    from .recorder_files import DIALOGUE

    day = tmp_path / "2026-03-01"
    day.mkdir()
    with open(day / "broken_live.m4a", "wb") as out:
        subprocess_args = [ffmpeg_exe(), "-v", "error", "-stream_loop", "-1", "-i", str(DIALOGUE), "-t", "300",
                           "-c:a", "aac", "-b:a", "64k", "-movflags", "frag_keyframe+empty_moov", "-f", "mp4",
                           "pipe:1"]
        import subprocess

        subprocess.run(subprocess_args, stdout=out, check=True)
    samples, info = decode_file(str(day / "broken_live.m4a"), ".m4a")
    assert info.stopped.startswith("ffmpeg stopped (exit ") and 0 < len(samples) < TARGET_SAMPLE_RATE, info
    manifest, _ = build_manifest(LocalFileSystem(), str(day), 7200.0, 1)
    [row] = manifest.iter_rows(named=True)
    assert row["result_class"] == "ok" and row["duration_estimated"] and row["duration_s"] > 250, row
    plan, flights = prepare_flights(manifest, budget_s=1800.0, max_units=1)
    [piece] = flight_source(plan, manifest, StorageResource().filesystem).load(flights["flight_id"][0]).pieces.values()
    assert piece.problem is None and piece.truncated and piece.num_samples == len(samples), piece
    assert piece.note.startswith("truncated: ffmpeg stopped (exit ") and "Reserved bit set" in piece.note, piece.note
    assert "0x" not in piece.note and f"of about {row['duration_s']:.1f} s estimated" in piece.note, piece.note
    # in windows (a long unit), the windows past where ffmpeg gave up say so: a cut, not an estimate's overshoot
    from batch_assets.long_units.windows import WindowSpec

    plan, _ = prepare_flights(manifest, budget_s=1800.0, max_units=1, windows=WindowSpec(60.0, 10.0))
    source = flight_source(plan, manifest, StorageResource().filesystem)
    windows = [p for f in plan.sort("window")["flight_id"] for p in source.load(f).pieces.values()]
    assert windows[0].problem is None and windows[0].num_samples == len(samples)
    assert all(w.problem[0] == "truncated" and "ffmpeg stopped" in w.problem[1] for w in windows[1:]), windows[1]
