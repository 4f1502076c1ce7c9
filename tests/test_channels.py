"""Two-channel calls heard channel by channel (`source/channels.py`, `gpu/section/channels.py`): how `auto` decides, on
real speech; the choices of a sidecar, the run and the kill switch; and a day of calls through the real job, by
channel and with the switch off (mixed and diarized), scored against the calls' script.
"""

from __future__ import annotations

import json

import jiwer
import numpy as np
import polars as pl
import pytest
import soundfile as sf

from batch_assets.exports.formats import rttm, srt
from batch_assets.ingest.unit_channels import ChannelChoiceError, UnitChannels, sidecar_channels, unit_channels
from batch_assets.source.channels import AUTO, LEAD_SHARE, MIX, SEPARATE, decide, lead_share

from .channel_calls import RATE, SAMPLE, script, two_channel_call, write_calls
from .conftest import make_resources, materialize_partition

DAY = "2026-03-02"


@pytest.fixture(scope="module")
def call() -> np.ndarray:
    samples, _ = two_channel_call("calls/2026/support_call.flac", turns=6)
    return samples.T


def test_auto_reads_a_call_by_channel_and_one_mix_mixed_measured_on_sound_not_silence(call):
    assert lead_share(call) > 0.3 and decide(AUTO, "setting", call, 2).separate
    mix = call.sum(axis=0)
    assert lead_share(np.stack([mix, mix])) == 0.0  # a "stereo" copy of a mono file
    assert not decide(AUTO, "setting", np.stack([mix, mix]), 2).separate
    room = np.stack([mix, 0.7 * np.roll(mix, 12) + 0.3 * np.roll(mix, 40)])  # two microphones, a few dB apart
    assert lead_share(room) < LEAD_SHARE
    assert not decide(AUTO, "setting", np.stack([mix, np.zeros_like(mix)]), 2).separate  # one channel only
    # a minute of quiet line before the call changes nothing: silence is not measured
    quiet = np.random.default_rng(0).normal(0, 1e-4, (2, 60 * RATE)).astype(np.float32)
    assert abs(lead_share(np.concatenate([quiet, call], axis=1)) - lead_share(call)) < 0.02
    assert not decide(AUTO, "setting", quiet, 2).separate  # nothing but silence: mixed
    # forced modes, and `auto` decides for two channels only
    assert decide(SEPARATE, "sidecar", np.stack([mix, mix]), 2).separate
    assert not decide(MIX, "run_config", call, 2).separate
    assert not decide(AUTO, "setting", np.stack([mix, mix, mix]), 3).separate


def test_the_choices_of_a_sidecar_the_run_and_the_switch():
    run = UnitChannels(AUTO, "setting", ("agent", "caller"))
    stored = sidecar_channels({"channels": "separate", "diarized_channels": [1], "num_speakers": 2}, "c.wav.json")
    unit = unit_channels(run, {"sidecar_channels": stored})
    assert (unit.mode, unit.source, unit.speakers, unit.diarized) == (SEPARATE, "sidecar", ("agent", "caller"), (1,))
    assert unit_channels(run, {}).speaker(1) == "caller" and UnitChannels().speaker(1) == "CHANNEL_1"
    assert unit_channels(run, {"sidecar_channels": stored}, enabled=False).mode == MIX
    assert sidecar_channels({"num_speakers": 2}, "c.wav.json") is None
    for bad, said in (({"channels": "stereo"}, "channels must be one of"),
                      ({"channel_speakers": ["a", "a"]}, "distinct"), ({"diarized_channels": ["1"]}, "numbers"),
                      ({"channel_speakers": "agent"}, "lists")):
        with pytest.raises(ChannelChoiceError, match=said):
            sidecar_channels(bad, "c.wav.json")


def _scored(words: pl.DataFrame, turns: list) -> tuple[float, float]:
    """(share of words on their channel's speaker, similarity to the script): each speaker label taken for the channel
    most of its words were spoken on (a word's channel: whose turn holds its midpoint); similarity: each channel's
    words in time order against its script (1 - character error rate), averaged."""
    def heard_on(row) -> set[int]:
        middle = (row["start_s"] + row["end_s"]) / 2
        return {t.channel for t in turns if t.start_s - 0.3 <= middle <= t.end_s + 0.3}

    rows = [(r["speaker"], heard_on(r), r) for r in words.iter_rows(named=True)]
    votes: dict = {}
    for speaker, channels, _ in rows:
        for channel in channels:
            votes.setdefault(speaker, {}).setdefault(channel, 0)
            votes[speaker][channel] += 1
    channel_of = {s: max(v, key=v.get) for s, v in votes.items()}
    right = sum(channel_of.get(speaker) in channels for speaker, channels, _ in rows)
    similarity = []
    for channel in (0, 1):
        said = sorted((r["start_s"], r["word"]) for speaker, _, r in rows if channel_of.get(speaker) == channel)
        reference = script(turns, channel)
        similarity.append(max(0.0, 1 - jiwer.cer(reference, " ".join(w for _, w in said) or "<empty>")))
    return right / len(rows), float(np.mean(similarity))


@pytest.mark.e2e
def test_a_day_of_calls_is_heard_channel_by_channel_and_the_switch_mixes_it(tmp_path, lock_dir):
    """Default settings: both calls (16 kHz FLAC with a sidecar naming its parties, 8 kHz mu-law WAV) read by channel,
    each word on its channel's speaker, no diarization; the one-mix file mixed and diarized (2 speakers). The same
    day with `channel_reading_enabled` off: every unit mixed and diarized, for the figures (printed)."""
    source = tmp_path / "source"
    calls = write_calls(source / DAY)
    sidecar = {"channel_speakers": ["agent", "caller"]}
    (source / DAY / "calls" / "support_call.flac.json").write_text(json.dumps(sidecar))
    figures = {}
    for enabled in (True, False):
        resources = make_resources(tmp_path / f"storage-{enabled}", lock_dir, source)
        config = {"ops": {"gpu_section": {"config": {"channel_reading_enabled": enabled}}}}
        assert materialize_partition(resources, DAY, run_config=config).success
        storage = resources["storage"]
        units = {r["unit_id"]: r for r in storage.read_parquet("transcripts", DAY, "units").iter_rows(named=True)}
        words = storage.read_parquet("transcripts", DAY, "words")
        mixed = units["meetings__one_mix.wav"]
        assert (mixed["channels"], mixed["channel_reading"], mixed["num_speakers"]) == (2, "mixed", 2)
        assert mixed["channel_source"] == ("auto" if enabled else "switch_off")
        for key, turns in calls.items():
            uid, unit_words = key.replace("/", "__"), words.filter(pl.col("unit_id") == key.replace("/", "__"))
            figures[key, enabled] = _scored(unit_words, turns)
            row = units[uid]
            assert (row["result_class"], row["channels"]) == ("transcribed", 2)
            if not enabled:
                assert (row["channel_reading"], row["channel_source"], unit_words["channel"].null_count()) == (
                    "mixed", "switch_off", len(unit_words))
                continue
            assert (row["channel_reading"], row["channel_source"]) == ("by_channel", "auto")
            assert row["channel_lead"] > 0.1
            names = ["agent", "caller"] if uid == "calls__support_call.flac" else ["CHANNEL_0", "CHANNEL_1"]
            assert sorted(zip(unit_words["channel"], unit_words["speaker"], strict=True)) == sorted(
                (c, names[c]) for c in unit_words["channel"])
            share, similarity = figures[key, enabled]
            assert share >= 0.98 and similarity >= (0.6 if key.endswith(".wav") else 0.8), (key, share, similarity)
            turns_table = storage.read_parquet("diarization", DAY, "turns").filter(pl.col("unit_id") == uid)
            assert set(zip(turns_table["channel"], turns_table["speaker"], strict=True)) == {(0, names[0]),
                                                                                              (1, names[1])}
            assert {line.split()[2] for line in rttm(turns_table, uid).splitlines()} == {"1", "2"}
            segments = storage.read_parquet("transcripts", DAY, "segments").filter(pl.col("unit_id") == uid)
            assert segments["start_s"].is_sorted() and set(segments["channel"]) == {0, 1}
            assert f"[{names[1]}]" in srt(segments, unit_words)
            assert storage.read_parquet("diarization", DAY, "speakers").filter(
                pl.col("unit_id") == uid)["segmentation"].to_list() == ["channel", "channel"]
    for (key, enabled), (share, similarity) in sorted(figures.items()):
        print(f"{key} {'by channel' if enabled else 'mixed, diarized'}: {share:.1%} of words on their channel's "
              f"speaker, similarity {similarity:.2f}")


def test_the_calls_are_what_the_sample_says(tmp_path):
    """The helper's calls: two channels each, the 8 kHz one mu-law, each reply overlapping the other party."""
    calls = write_calls(tmp_path)
    assert sf.info(tmp_path / "calls" / "phone_call.wav").subtype == "ULAW"
    for key, turns in calls.items():
        assert sf.info(tmp_path / key).channels == 2 and {t.channel for t in turns} == {0, 1}
        assert any(b.start_s < a.end_s for a, b in zip(turns, turns[1:], strict=False) if a.channel != b.channel)
    assert (SAMPLE / "meetings" / "standup.wav").exists()
