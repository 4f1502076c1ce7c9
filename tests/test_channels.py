"""Two-channel calls heard channel by channel (`source/channels.py`, `gpu/section/channels.py`): how `auto` decides, on
real speech; the choices of a sidecar, the run and the kill switch; and a day of calls through the real job, by
channel and with the switch off (mixed and diarized), scored against the calls' script.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import polars as pl
import pytest
import soundfile as sf

from batch_assets.exports.formats import rttm, srt
from batch_assets.gate.compare import gate
from batch_assets.ingest.speaker_hints import SpeakerHints
from batch_assets.ingest.unit_channels import ChannelChoiceError, UnitChannels, sidecar_channels, unit_channels
from batch_assets.long_units.long_audio import call_figures
from batch_assets.source.channels import (
    AUTO,
    BLEED_SMOOTH,
    LEAD_SHARE,
    MIX,
    SEPARATE,
    decide,
    frame_db,
    lead_share,
    own_regions,
)
from batch_assets.switches import EXACT_SWITCHES

from .channel_calls import RATE, SAMPLE, call_of, write_calls, write_long_call
from .conftest import make_resources, materialize_partition

DAY = "2026-03-02"


@pytest.fixture(scope="module")
def call() -> np.ndarray:
    samples, _ = call_of(("calls/2026/support_call.flac",), turns=6)
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


def test_a_channels_speech_is_its_own_not_the_other_partys_echo():
    """Line echo (the other party at -26 dB) is no speech of a channel; overlapping speech stays on both sides; a
    channel's idle line is no speech of it."""
    samples, turns = call_of(("calls/2026/support_call.flac",), turns=6)
    echoed = samples.T + 0.05 * samples.T[::-1]
    levels = [frame_db(channel, BLEED_SMOOTH) for channel in echoed]
    whole = [(0.0, echoed.shape[1] / RATE)]
    for channel in (0, 1):
        kept = own_regions(whole, levels[channel], levels[1 - channel])
        inside = lambda t, spans: any(s <= t <= e for s, e in spans)  # noqa: E731
        own = [t for t in turns if t.channel == channel]
        others = [t for t in turns if t.channel != channel]
        assert all(inside((t.start_s + t.end_s) / 2, kept) for t in own), (channel, kept)
        # the other party alone (not overlapping this one's turns): gone
        alone = [(t.start_s + 0.7, t.end_s - 0.7) for t in others if t.end_s - t.start_s > 2]
        assert alone and not any(inside(m, kept) for s, e in alone for m in np.linspace(s, e, 5)), (channel, kept)
        # where both speak (each reply starts 0.6 s before the other stops), both keep it
        for a, b in zip(turns, turns[1:], strict=False):
            if a.channel != b.channel:
                assert inside((b.start_s + a.end_s) / 2, kept), (channel, a, b, kept)
    # the sample's call (each channel its party's turns over a -54 dBFS line): a channel's idle line, in the pauses
    # where neither party speaks too, is no speech of it, even where a VAD took all but its first 0.6 s for speech
    # (the idle line's level is measured outside the VAD's regions); every turn of its party is
    call = sf.read(SAMPLE / "calls" / "2026" / "support_call.flac", dtype="float32")[0].T
    truth = json.loads((SAMPLE.parents[1] / "truth" / "2026-01-15.json").read_text())["calls/2026/support_call.flac"]
    levels = [frame_db(channel, BLEED_SMOOTH) for channel in call]
    for channel, party in enumerate(("carol", "dave")):
        kept = own_regions([(0.6, call.shape[1] / RATE)], levels[channel], levels[1 - channel])
        own = [(t["start_s"], t["end_s"]) for t in truth["turns"] if t["speaker"] == party]
        assert len(kept) == len(own), (channel, kept, own)
        assert all(abs(s - a) < 0.15 and abs(e - b) < 0.15 for (s, e), (a, b) in zip(kept, own, strict=True)), kept


def test_the_choices_of_a_sidecar_the_run_and_the_switch():
    run = UnitChannels(AUTO, "setting", ("agent", "caller"))
    stored = sidecar_channels({"channels": "separate", "diarized_channels": [1], "num_speakers": 2}, "c.wav.json")
    unit = unit_channels(run, {"sidecar_channels": stored})
    assert (unit.mode, unit.source, unit.speakers, unit.diarized) == (SEPARATE, "sidecar", ("agent", "caller"), (1,))
    assert unit_channels(run, {}).speaker(1) == "caller" and UnitChannels().speaker(1) == "CHANNEL_1"
    assert unit_channels(run, {"sidecar_channels": stored}, enabled=False).mode == MIX
    assert sidecar_channels({"num_speakers": 2}, "c.wav.json") is None
    # a diarized channel is told the unit's hints less the one-party channels; two diarized channels, none
    assert SpeakerHints(num_speakers=3).less(1) == SpeakerHints(num_speakers=2)
    assert SpeakerHints(min_speakers=1, max_speakers=4).less(1) == SpeakerHints(min_speakers=1, max_speakers=3)
    assert SpeakerHints(num_speakers=3).less(1, shared=True) == SpeakerHints()
    for bad, said in (({"channels": "stereo"}, "channels must be one of"),
                      ({"channel_speakers": ["agent", "CHANNEL_0"]}, "CHANNEL_N names channel N"),
                      ({"channel_speakers": ["a", "a"]}, "distinct"), ({"diarized_channels": ["1"]}, "numbers"),
                      ({"channel_speakers": "agent"}, "lists")):
        with pytest.raises(ChannelChoiceError, match=said):
            sidecar_channels(bad, "c.wav.json")


@pytest.mark.e2e
def test_a_day_of_calls_is_heard_channel_by_channel_and_the_switch_mixes_it(tmp_path, lock_dir):
    """Default settings: both calls (16 kHz FLAC with a sidecar naming its parties, 8 kHz mu-law WAV) read by channel,
    each word on its channel's speaker, no diarization; the one-mix file mixed and diarized (2 speakers); a call
    longer than the window (60 s here) read by channel in windows, its channels' speakers kept whole. The same day
    with every exact lever off: every published column the same (the exact gate); a rerun of the two calls with
    `channel_reading_enabled` off: mixed and diarized, the other units' rows kept; the figures printed."""
    source = tmp_path / "source"
    calls = write_calls(source / DAY) | {"calls/long_call.flac": write_long_call(source / DAY)}
    sidecar = {"channel_speakers": ["agent", "caller"]}
    (source / DAY / "calls" / "support_call.flac.json").write_text(json.dumps(sidecar))
    # a conference bridge: the agent on channel 0, a meeting room (two voices) on channel 1, diarized within it
    agent, _ = call_of(("calls/2026/support_call.flac",), turns=4)
    room, _ = sf.read(SAMPLE / "meetings" / "standup.wav", dtype="float32")
    sf.write(source / DAY / "calls" / "bridge.wav", np.stack([agent[:, 0], room[: len(agent)]], axis=1), RATE)
    bridge = {"channels": "separate", "channel_speakers": ["agent", "room"], "diarized_channels": [1]}
    (source / DAY / "calls" / "bridge.wav.json").write_text(json.dumps(bridge))
    rerun = {"channel_reading_enabled": False, "units": [*calls][:2]}  # a rerun of the two calls, mixed
    figures, runs = {}, {"by channel": {}, "exact levers off": dict.fromkeys(EXACT_SWITCHES, False),
                         "switch off": rerun}
    for name, switches in runs.items():
        resources = make_resources(tmp_path / ("exact" if name == "exact levers off" else "by-channel"), lock_dir,
                                   source)
        config = {"ops": {"gpu_section": {"config": switches},
                          "prepared_flights": {"config": {"max_unit_seconds": 60.0, "window_overlap_seconds": 10.0}}}}
        assert materialize_partition(resources, DAY, run_config=config).success
        storage, enabled = resources["storage"], name == "by channel"
        runs[name] = storage
        if name == "exact levers off":  # the channel path's every column, each lever off
            verdict = gate(runs["by channel"], storage, [DAY], exact=True)
            assert verdict.passed and not verdict.columns.changed, verdict.table()
            continue
        units = {r["unit_id"]: r for r in storage.read_parquet("transcripts", DAY, "units").iter_rows(named=True)}
        words = storage.read_parquet("transcripts", DAY, "words")
        plan = storage.read_parquet("prepared_flights", DAY, "plan")
        assert plan.filter(pl.col("unit_id") == "calls__long_call.flac")["window"].to_list() == [0, 1]
        _assert_the_bridge(storage, units["calls__bridge.wav"])  # a rerun of other units keeps its rows
        mixed = units["meetings__one_mix.wav"]
        assert (mixed["channels"], mixed["channel_reading"], mixed["num_speakers"]) == (2, "mixed", 2)
        assert (mixed["channel_source"], mixed["channel_lead"]) == ("auto", 0.0)
        for key, turns in list(calls.items())[: 3 if enabled else 2]:
            uid, unit_words = key.replace("/", "__"), words.filter(pl.col("unit_id") == key.replace("/", "__"))
            figures[key, enabled] = call_figures(unit_words.to_dicts(), turns)
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
            assert _on_their_party(unit_words.to_dicts(), turns, names) >= 0.98, key  # against the script
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


def _on_their_party(words: list[dict], turns: list, names: list[str]) -> float:
    """The share of words whose speaker is the channel a turn of the script holding the word's midpoint was said on
    (0.3 s either side): the channels are not swapped, nor the other party's echo taken for words."""
    def said_on(row: dict) -> set[int]:
        middle = (row["start_s"] + row["end_s"]) / 2
        return {t.channel for t in turns if t.start_s - 0.3 <= middle <= t.end_s + 0.3}

    return sum(names.index(row["speaker"]) in said_on(row) for row in words) / len(words)


def _assert_the_bridge(storage, unit: dict) -> None:
    """A sidecar's `separate` with channel 1 diarized: channel 0 its speaker's, channel 1 its room's voices."""
    assert (unit["channel_reading"], unit["channel_source"], unit["result_class"]) == ("by_channel", "sidecar",
                                                                                      "transcribed")
    turns = storage.read_parquet("diarization", DAY, "turns").filter(pl.col("unit_id") == "calls__bridge.wav")
    by_channel = {c: set(turns.filter(pl.col("channel") == c)["speaker"]) for c in (0, 1)}
    assert by_channel[0] == {"agent"} and by_channel[1] and all(s.startswith("room_SPEAKER_") for s in by_channel[1])
    speakers = storage.read_parquet("diarization", DAY, "speakers").filter(pl.col("unit_id") == "calls__bridge.wav")
    diarized = speakers.filter(pl.col("speaker") != "agent")
    assert diarized["embedding"].null_count() == 0 and "channel" not in diarized["segmentation"].to_list()
    assert speakers.filter(pl.col("speaker") == "agent")[["segmentation", "embedding_path"]].row(0) == (
        "channel", "not run")
    assert unit["num_speakers"] == 1 + len(by_channel[1])


def test_the_calls_are_what_the_sample_says(tmp_path):
    """The helper's calls: two channels each, the 8 kHz one mu-law, each reply overlapping the other party."""
    calls = write_calls(tmp_path)
    assert sf.info(tmp_path / "calls" / "phone_call.wav").subtype == "ULAW"
    for key, turns in calls.items():
        assert sf.info(tmp_path / key).channels == 2 and {t.channel for t in turns} == {0, 1}
        assert any(b.start_s < a.end_s for a, b in zip(turns, turns[1:], strict=False) if a.channel != b.channel)
        assert all(t.text for t in turns) and sf.info(tmp_path / key).duration > turns[-1].end_s


def test_each_way_of_decoding_lays_a_call_out_channel_by_channel(tmp_path, call):
    """The flight's audio of a unit read by channel holds each channel after the other, after the units before it,
    decoded whole, streamed to its end (a FLAC written to a pipe: no length stated) or cut into windows (decided
    once, on the first window); `separate` reads any count (three here, at 8 kHz: resampled), `mix` none; each
    channel is the object's own, in order, and the mix is the same samples whichever way it is read."""
    import soxr
    from fsspec.implementations.local import LocalFileSystem

    from batch_assets.ingest.manifest import build_manifest
    from batch_assets.ingest.prepare import prepare_flights
    from batch_assets.long_units.windows import WindowSpec
    from batch_assets.source.decode import decode_file
    from batch_assets.source.flight_audio import flight_source
    from batch_assets.storage.resource import StorageResource

    from .recorder_files import _encode

    day = tmp_path / "2026-03-03"
    day.mkdir()
    call = call * np.array([[1.0], [0.5]], dtype=np.float32)  # channel 1 quieter: the order shows
    long_call = np.tile(call, 1 + 75 * RATE // call.shape[1])[:, : 75 * RATE]  # past a 60 s window
    sf.write(tmp_path / "call.wav", call.T, RATE, subtype="FLOAT")  # piped: planned at twice its estimate
    _encode(day / "piped.flac", ["-i", str(tmp_path / "call.wav")], ["-c:a", "flac"], "flac", piped=True)
    sf.write(day / "long.wav", long_call.T, RATE, subtype="FLOAT")
    three = np.concatenate([call, call[:1] * 0.25])
    sf.write(day / "three.wav", soxr.resample(three.T, RATE, 8000), 8000, subtype="FLOAT")
    sf.write(day / "forced_mix.wav", soxr.resample(call.T, RATE, 44100), 44100, subtype="FLOAT")
    sf.write(day / "aa_mono.wav", call[0], RATE, subtype="FLOAT")  # packed before a call: its offset is not 0
    manifest, _ = build_manifest(LocalFileSystem(), str(day), 7200.0, 1)
    modes = {"piped.flac": (AUTO, "setting"), "long.wav": (AUTO, "setting"), "three.wav": (SEPARATE, "run_config"),
             "forced_mix.wav": (MIX, "sidecar"), "aa_mono.wav": (AUTO, "setting")}
    plan, _ = prepare_flights(manifest, budget_s=1800.0, max_units=2, windows=WindowSpec(60.0, 10.0))
    source = flight_source(plan, manifest, StorageResource().filesystem, modes=modes)
    pieces = {}
    for flight_id in plan["flight_id"].unique(maintain_order=True):
        flight = source.load(flight_id)
        for uid, piece in flight.pieces.items():
            assert piece.problem is None, (uid, piece)
            pieces[uid] = piece
            channels = piece.reading.channels if piece.reading.separate else 1
            heard = flight.audio[piece.offset_samples : piece.offset_samples + channels * piece.num_samples]
            name = uid.removesuffix(".w0000").removesuffix(".w0001")
            start = 50 * RATE if uid.endswith(".w0001") else 0
            mix, _ = decode_file(str(day / name), pathlib.Path(name).suffix)
            if channels == 1:  # the mix, bit for bit
                assert np.array_equal(heard, mix[start : start + piece.num_samples]), uid
                continue
            levels = [float(np.sqrt(np.mean(c**2))) for c in heard.reshape(channels, -1)]
            assert levels == sorted(levels, reverse=True), (uid, levels)  # each channel in its place
            assert np.allclose(heard.reshape(channels, -1).mean(axis=0), mix[start : start + piece.num_samples],
                               atol=1e-5), uid
    assert plan.filter(pl.col("unit_id") == "forced_mix.wav")["offset_samples"][0] > 0
    read = {uid: (p.reading.channels, p.reading.reading, p.reading.source) for uid, p in pieces.items()}
    assert read == {"piped.flac": (2, "by_channel", "auto"), "long.wav.w0000": (2, "by_channel", "auto"),
                    "long.wav.w0001": (2, "by_channel", "auto"), "three.wav": (3, "by_channel", "run_config"),
                    "forced_mix.wav": (2, "mixed", "sidecar"), "aa_mono.wav": (1, "mixed", "setting")}
    assert manifest.filter(pl.col("unit_id") == "piped.flac")["duration_estimated"][0]


def test_a_change_of_channel_choice_redoes_the_flights_of_multichannel_units_only():
    """What the run config gives each unit, part of its flight's fingerprint (`gpu/steps/resume.py`): another mode,
    source, speakers or the kill switch changes a two-channel unit's, never a mono unit's."""
    from batch_assets.gpu.steps.run_config import ListConfig, unit_inputs

    manifest = pl.DataFrame({"unit_id": ["mono.wav", "call.wav"], "relative_key": ["mono.wav", "call.wav"],
                             "channels": [1, 2]})
    routing = {"en": "builtin:tiny-tdt"}
    default = unit_inputs(manifest, ListConfig(), routing)
    for changed in (ListConfig(channels="mix"), ListConfig(channels="auto"), ListConfig(channel_reading_enabled=False),
                    ListConfig(channel_speakers=["agent", "caller"]), ListConfig(diarized_channels=[1])):
        inputs = unit_inputs(manifest, changed, routing)
        assert inputs["mono.wav"] == default["mono.wav"] and inputs["call.wav"] != default["call.wav"], changed
