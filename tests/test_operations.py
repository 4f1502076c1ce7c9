"""Operations: the daily schedule's partition, the asset job, and one run carrying several partitions."""

from __future__ import annotations

import datetime

import dagster as dg
import pytest

from batch_assets.definitions import defs
from batch_assets.orchestration.partitions import BACKFILL_PARTITIONS_PER_RUN
from batch_assets.orchestration.schedules import SCHEDULE_HOUR_UTC

from .conftest import make_resources
from .partition_sources import make_source
from .published_arrays import assert_arrays_load

UTC = datetime.UTC


@pytest.mark.parametrize(
    ("tick", "partition"),
    [
        (datetime.datetime(2026, 3, 2, SCHEDULE_HOUR_UTC, 0, tzinfo=UTC), "2026-03-01"),
        (datetime.datetime(2026, 3, 1, SCHEDULE_HOUR_UTC, 0, tzinfo=UTC), "2026-02-28"),  # month boundary
        (datetime.datetime(2027, 1, 1, SCHEDULE_HOUR_UTC, 0, tzinfo=UTC), "2026-12-31"),  # year boundary
    ],
)
def test_schedule_tick_requests_yesterdays_partition(tick, partition):
    schedule = defs.resolve_schedule_def("daily_transcription")
    assert schedule.cron_schedule == f"0 {SCHEDULE_HOUR_UTC} * * *" and schedule.execution_timezone == "UTC"
    requests = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=tick)).run_requests
    assert [r.partition_key for r in requests] == [partition]
    assert schedule.job_name == "transcribe_partition"


def test_asset_job_covers_the_six_assets_and_their_checks_with_retries():
    job = defs.resolve_job_def("transcribe_partition")
    keys = {k.to_user_string() for k in job.asset_layer.executable_asset_keys}
    assert keys == {"fetched_audio", "prepared_flights", "vad_scores", "diarization", "transcripts",
                    "transcript_exports"}
    checks = {c.name for c in job.asset_layer.asset_graph.asset_check_keys}
    assert checks == {"units_accounted_for", "partition_has_audio", "no_words_on_silent_units", "exports_cover_units",
                      "exports_match_tables"}  # no baseline configured
    assert job.tags["dagster/max_retries"] == "2"
    for assets_def in defs.assets:
        policy = assets_def.backfill_policy
        assert policy is not None and policy.max_partitions_per_run == BACKFILL_PARTITIONS_PER_RUN
        ops = list(assets_def.node_def.iterate_op_defs())  # the GPU work is a graph: its shard steps retry
        assert any(op.retry_policy is not None for op in ops)


@pytest.mark.e2e
def test_one_run_carries_several_partitions_each_with_its_own_materialization(tmp_path, lock_dir):
    from batch_assets.definitions import all_assets, transcripts_checks
    from batch_assets.gpu.steps.resources import GpuResource, model_loads

    layout = {"2026-02-01": ["meetings/planning.mp3"],
              "2026-02-02": ["silence/empty_room.wav", "calls/2026/support_call.flac"]}
    source = make_source(tmp_path / "source", layout)
    resources = make_resources(tmp_path / "storage", lock_dir, source=source)
    # a batch size no other test uses: models this process has not loaded yet, so the load is counted here
    resources["gpu"] = GpuResource(lock_dir=str(lock_dir), device="cpu", embedding_batch_size=7)
    loads_before = model_loads()
    result = dg.materialize(
        [*all_assets, *transcripts_checks],
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
        tags={"dagster/asset_partition_range_start": "2026-02-01", "dagster/asset_partition_range_end": "2026-02-02"},
    )
    assert result.success
    assert_arrays_load(resources["storage"])
    events = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
    by_asset: dict[str, dict[str, dict]] = {}
    for m in events:
        by_asset.setdefault(m.asset_key.to_user_string(), {})[m.partition] = m.metadata
    assert set(by_asset) == {"fetched_audio", "prepared_flights", "vad_scores", "diarization", "transcripts",
                             "transcript_exports"}
    for asset, partitions in by_asset.items():
        assert set(partitions) == set(layout), asset
    transcripts = by_asset["transcripts"]
    assert transcripts["2026-02-01"]["units"].value == 1 and transcripts["2026-02-02"]["units"].value == 2
    assert transcripts["2026-02-02"]["units_by_class"].value == {"silent": 1, "transcribed": 1}
    assert transcripts["2026-02-01"]["partitions_in_run"].value == 2
    assert model_loads() - loads_before == 1  # one model load served both partitions
    storage = resources["storage"]
    for partition, keys in layout.items():
        units = storage.read_parquet("transcripts", partition, "units")
        assert sorted(units["source_uri"].str.split(f"{partition}/").list.last()) == sorted(keys)
    # every check recorded against each partition, and passed
    evaluations = result.get_asset_check_evaluations()
    per_partition = {(e.check_name, e.partition): e.passed for e in evaluations if e.partition is not None}
    checks = {"units_accounted_for", "partition_has_audio", "no_words_on_silent_units"}
    assert set(per_partition) == {(c, p) for c in checks for p in layout}
    assert all(per_partition.values())


@pytest.mark.e2e
def test_unit_subset_rerun_refuses_a_multi_partition_run(tmp_path, lock_dir):
    from batch_assets.definitions import all_assets

    source = make_source(tmp_path / "source",
                         {"2026-02-01": ["silence/empty_room.wav"], "2026-02-02": ["silence/empty_room.wav"]})
    result = dg.materialize(
        all_assets,
        resources=make_resources(tmp_path / "storage", lock_dir, source=source),
        instance=dg.DagsterInstance.ephemeral(),
        tags={"dagster/asset_partition_range_start": "2026-02-01", "dagster/asset_partition_range_end": "2026-02-02"},
        run_config={"ops": {"gpu_section": {"config": {"units": ["silence/empty_room.wav"]}}}},
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert "one partition" in failure.event_specific_data.error.message
    assert not any(e.event_type_value == "STEP_UP_FOR_RETRY" for e in result.all_events)


def _read_all(leader: int) -> str:
    """Everything written to a closed pseudo-terminal: one os.read returns what has arrived so far (CI once got the
    text without its closing CR LF), so read until the follower's end reports EIO."""
    import os

    chunks = []
    try:
        while chunk := os.read(leader, 4096):
            chunks.append(chunk)
    except OSError:  # EIO: the follower is closed and everything written has been read
        pass
    finally:
        os.close(leader)
    return b"".join(chunks).decode()


def test_progress_is_one_line_rewritten_on_a_terminal_and_a_line_each_elsewhere(tmp_path):
    """What `batch-assets run` does with the GPU steps' progress lines (cli/run_output.py: Terminal), on a real
    pseudo-terminal and on a file; the lines themselves come from gpu/steps/progress.py."""
    import os
    import pty

    from batch_assets.cli.run_output import Terminal
    from batch_assets.gpu.steps.progress import StepProgress

    progress = StepProgress("2026-01-15 shard 0", planned_flights=3, planned_audio_s=3600.0, started=0.0)
    progress.resumed(1, 1200.0)  # committed by an earlier attempt
    first = progress.flight_done("flight-0001", 4, 1200.0, now=60.0)
    assert first.startswith("progress: 2026-01-15 shard 0: 2 of 3 flights done (flight-0001 committed), 4 units, "
                            "0.667 of 1.000 audio-h, 20.0 audio-h per hour, about 60 s left"), first
    last = progress.flight_done("flight-0002", 2, 1200.0, now=120.0)
    assert "3 of 3 flights done" in last and last.endswith("done")
    leader, follower = pty.openpty()
    with os.fdopen(follower, "w") as stream:
        terminal = Terminal(stream)
        terminal.status(first)
        terminal.status(last)
        terminal.line("  ok     gpu_section.gpu_shard")
    shown = _read_all(leader)
    assert terminal.live and shown == f"\r\x1b[K{first}\r\x1b[K{last}\r\x1b[K  ok     gpu_section.gpu_shard\r\n", shown
    with (tmp_path / "out.txt").open("w") as stream:
        terminal = Terminal(stream)
        terminal.status(first)
        terminal.status(last)
        terminal.line("  ok     gpu_section.gpu_shard")
    assert not terminal.live
    assert (tmp_path / "out.txt").read_text() == f"{first}\n{last}\n  ok     gpu_section.gpu_shard\n"


def test_a_run_on_your_own_audio_with_a_builtin_model_says_how_to_run_the_production_ones():
    """Issue 64: a real telephone call came back `transcribed` with a word error rate of 1.02 and one speaker, and
    nothing said the builtin models hear only synthetic speech."""
    from batch_assets.cli.run_output import BUILTIN_NOTE, builtin_model_note
    from batch_assets.storage.resource import DEFAULT_SOURCE_URL

    builtin = {"asr": {"en": "builtin:tiny-tdt"}, "language_id": None, "diarization": "builtin:tiny-diarization"}
    production = {"asr": {"en": "nvidia/parakeet-tdt-0.6b-v2"}, "language_id": "langid_ambernet",
                  "diarization": "pyannote/speaker-diarization-community-1"}
    assert builtin_model_note(builtin, "s3://calls/audio", DEFAULT_SOURCE_URL) == BUILTIN_NOTE
    assert "--asr-models production" in BUILTIN_NOTE and "community-1" in BUILTIN_NOTE
    assert builtin_model_note(builtin, DEFAULT_SOURCE_URL + "/", DEFAULT_SOURCE_URL) is None  # the bundled sample
    assert builtin_model_note(production, "s3://calls/audio", DEFAULT_SOURCE_URL) is None
    mixed = production | {"diarization": "builtin:tiny-diarization"}
    assert builtin_model_note(mixed, "/data/calls", DEFAULT_SOURCE_URL) == BUILTIN_NOTE
