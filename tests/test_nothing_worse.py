"""Nothing published worse, nothing misread (issue 21): systemic faults, unit identity, re-reads, the lease's edges.

Real files, real Dagster runs with the real (tiny) NeMo and pyannote models, a real S3 API (moto) on
loopback, real processes. Faults are injected where they arise: objects moved to a cold storage class,
a torch forward hook raising what a broken GPU raises, files swapped on disk, a store that drops
`If-None-Match`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import pathlib
import shutil
import subprocess
import sys
import time

import dagster as dg
import numpy as np
import polars as pl
import pytest
import soundfile as sf

from batch_assets.storage.resource import StorageResource

from .conftest import FLIGHTS_OF_ONE, in_decoder_mode, make_resources, materialize_partition
from .partition_sources import SAMPLE
from .s3_server import S3Server
from .test_reliability import _failure_messages, _files
from .test_shards import _identity

COLD_DAY, FIRST_DAY = "2026-04-01", "2026-04-02"
S3_KEYS = {"meetings/planning.mp3": "meetings/planning.mp3", "call::1.wav": "meetings/standup.wav"}


def _s3_storage(s3: S3Server, storage_root: pathlib.Path) -> StorageResource:
    return StorageResource(source_url="s3://cold-audio", storage_url=str(storage_root), s3_endpoint_url=s3.endpoint,
                           s3_region="us-east-1", s3_access_key_id="testing", s3_secret_access_key="testing")


def _freeze(client, partition: str) -> None:
    """Move every object of the partition to a cold storage class: still listed, no longer served."""
    for key in S3_KEYS:
        client.copy_object(Bucket="cold-audio", Key=f"{partition}/{key}",
                           CopySource={"Bucket": "cold-audio", "Key": f"{partition}/{key}"},
                           StorageClass="GLACIER", MetadataDirective="COPY")


@pytest.mark.e2e
def test_a_bucket_that_lists_but_will_not_serve_keeps_the_day(tmp_path, lock_dir):
    """Finding 1 (and 4 on S3: `call::1.wav` is a key, not a URL chain). Before: both units fetch_failed, exit 0,
    185 words replaced by 0. Now the degrade guard refuses, byte for byte; `allow_degrade` forces it."""
    with S3Server() as s3:
        client = s3.client()
        client.create_bucket(Bucket="cold-audio")
        for partition in (COLD_DAY, FIRST_DAY):
            for key, sample in S3_KEYS.items():
                client.put_object(Bucket="cold-audio", Key=f"{partition}/{key}", Body=(SAMPLE / sample).read_bytes())
        resources = make_resources(tmp_path / "storage", lock_dir) | {"storage": _s3_storage(s3, tmp_path / "storage")}
        assert materialize_partition(resources, COLD_DAY).success
        storage = resources["storage"]
        good = storage.read_parquet("transcripts", COLD_DAY, "units")
        assert good["result_class"].to_list() == ["transcribed", "transcribed"], good  # `call::1.wav` read as itself
        words = int(good["num_words"].sum())
        before = _files(tmp_path / "storage")

        _freeze(client, COLD_DAY)
        refused = materialize_partition(resources, COLD_DAY, raise_on_error=False)
        assert not refused.success
        message = _failure_messages(refused)
        assert "2 of the 2 units that have transcripts now would become 2 fetch_failed" in message, message
        assert "not valid for the object's storage class" in message
        assert "allow_degrade: true" in message and "batch-assets run --allow-degrade" in message
        assert _files(tmp_path / "storage") == before  # tables and arrays byte-identical
        assert not [e for e in refused.all_events if e.event_type_value == "STEP_RESTARTED"]

        forced = {"ops": {"fetched_audio": {"config": {"allow_degrade": True}}}}
        published = materialize_partition(resources, COLD_DAY, run_config=forced, raise_on_error=False)
        assert set(storage.read_parquet("transcripts", COLD_DAY, "units")["result_class"]) == {"fetch_failed"}
        # published as told, and told again: a day whose every unit went unread fails its ERROR check (issue 64)
        [check] = [e for e in published.get_asset_check_evaluations() if e.check_name == "units_accounted_for"]
        assert not published.success and not check.passed and "went unread" in check.metadata["problem"].value

        _freeze(client, FIRST_DAY)  # a day never materialized, every object cold
        first = materialize_partition(resources, FIRST_DAY, raise_on_error=False)
        assert not first.success
        message = _failure_messages(first)
        assert "all 2 units are fetch_failed for one reason" in message and "a configuration or system fault" in message
        assert not (tmp_path / "storage" / "fetched_audio" / FIRST_DAY / "manifest.parquet").exists()
        print(f"cold storage class: {words} words kept; refusal: {message.splitlines()[0][:300]}")


# -- device faults ----------------------------------------------------------------------------------------------

MARKER = np.float32(0.987654321)  # a sample value the injected fault recognises in the unit it belongs to


def _flight(models_rate: int = 16000):
    """Two speech units in one flight (the sample's standup and planning calls), the second carrying MARKER."""
    from batch_assets.gpu.section.flight import SectionUnit
    from batch_assets.source.decode import decode_file

    first, _ = decode_file(str(SAMPLE / "meetings" / "standup.wav"), ".wav")
    second, _ = decode_file(str(SAMPLE / "meetings" / "planning.mp3"), ".mp3")
    first, second = first[: 12 * models_rate], second[: 12 * models_rate].copy()
    second[1000] = MARKER
    units = [SectionUnit("a", 0, len(first)), SectionUnit("b", len(first), len(second))]
    return np.concatenate([first, second]), units


@pytest.fixture(scope="module")
def loaded(lock_dir):
    from batch_assets.gpu.steps.resources import GpuResource

    return GpuResource(lock_dir=str(lock_dir), device="cpu").load()


@pytest.mark.parametrize("fault,device", [
    (ValueError("input has a shape this model refuses"), False),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), True),
    ("oom", True),
])
def test_a_device_fault_stops_the_worker_and_a_unit_fault_fails_only_its_unit(loaded, fault, device):
    """Finding 2. Before: every unit raising a CUDA error was classed `failed` (a broken GPU published as bad audio).
    Now a device fault raises DeviceFault (the caller quarantines the worker); any other error fails its unit only."""
    import torch

    from batch_assets.gpu.adapters import pyannote_adapter
    from batch_assets.gpu.device.faults import DeviceFault
    from batch_assets.gpu.section.flight import process_flight
    from batch_assets.gpu.section.levers import Levers
    from batch_assets.gpu.section.stats import SectionStats

    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB") if fault == "oom" else fault

    def inject(_module, args):
        if bool((args[0] == torch.tensor(MARKER)).any()):
            raise error

    audio, units = _flight()
    in_decoder_mode(loaded, Levers())
    model = pyannote_adapter.segmentation_inference(loaded.diarization).model
    handle = model.register_forward_pre_hook(inject)
    try:
        if device:
            with pytest.raises(DeviceFault, match="device fault in (batched VAD of a, b|VAD of b)"):
                process_flight(loaded, "f0", audio, units, Levers(), SectionStats())
            return
        outcomes = {o.unit_id: o for o in process_flight(loaded, "f0", audio, units, Levers(), SectionStats())}
    finally:
        handle.remove()
    assert outcomes["a"].result_class == "transcribed" and outcomes["a"].words
    assert outcomes["b"].result_class == "failed" and "shape this model refuses" in outcomes["b"].reason


def _run_with_a_broken_gpu(storage_root: str, source: str, lock_dir: str, answers) -> None:
    """In a process of its own (a quarantine is for the process's life): one run whose ASR raises a CUDA error."""
    os.environ["BATCH_ASSETS_LOCK_DIR"] = lock_dir
    resources = make_resources(pathlib.Path(storage_root), pathlib.Path(lock_dir), source=pathlib.Path(source))
    models = resources["gpu"].load()

    def broken(*_):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    models.asr.encoder.register_forward_pre_hook(broken)
    result = materialize_partition(resources, COLD_DAY, run_config={"ops": FLIGHTS_OF_ONE}, raise_on_error=False)
    retried = [str(e.event_specific_data.error) for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    answers.put({"success": result.success, "failures": "\n".join([*retried, _failure_messages(result)]),
                 "restarts": sum(e.event_type_value == "STEP_RESTARTED" for e in result.all_events)})


@pytest.mark.e2e
def test_a_broken_gpu_fails_the_step_keeps_the_day_and_the_committed_flights(tmp_path, lock_dir, monkeypatch):
    """Finding 2, end to end: the first flight (silent: no ASR) commits, the second hits the broken GPU."""
    source = tmp_path / "source" / COLD_DAY
    (source / "a_quiet").mkdir(parents=True)
    shutil.copy(SAMPLE / "silence" / "empty_room.wav", source / "a_quiet" / "room.wav")
    (source / "meetings").mkdir()
    shutil.copy(SAMPLE / "meetings" / "planning.mp3", source / "meetings" / "planning.mp3")
    storage_root = tmp_path / "storage"
    resources = make_resources(storage_root, lock_dir, source=tmp_path / "source")
    assert materialize_partition(resources, COLD_DAY, run_config={"ops": FLIGHTS_OF_ONE}).success
    # the GPU section's tables and arrays (ingest reruns, rightly)
    published = ("vad_scores", "diarization", "transcripts")
    before = {k: v for k, v in _files(storage_root).items() if k.startswith(published)}

    answers = multiprocessing.get_context("spawn").Queue()
    child = multiprocessing.get_context("spawn").Process(
        target=_run_with_a_broken_gpu, args=(str(storage_root), str(tmp_path / "source"), str(lock_dir), answers))
    # the child's GPU step is retried after 1 s, not the default 30 s (its environment is this one at start)
    monkeypatch.setenv("BATCH_ASSETS_GPU_RETRY_DELAY_SECONDS", "1")
    child.start()
    answer = answers.get(timeout=600)
    child.join(60)
    assert not answer["success"]
    assert "worker quarantined after a device fault" in answer["failures"], answer["failures"]
    assert ("illegal memory access" in answer["failures"]
            and "1 of the 2 flight(s) it ran are committed" in answer["failures"])
    assert "this worker is quarantined and refuses GPU work" in answer["failures"]  # the retry, in this same process
    assert answer["restarts"] >= 1  # retried: in a fresh process (a pod) on a deployment
    after = {k: v for k, v in _files(storage_root).items() if k.startswith(published)}
    assert {k: after.get(k) for k in before} == before  # nothing published over the good day: every file as it was
    extra = [k for k in after if k not in before]  # the committed flight's score array, beside its commit (for resume)
    assert len(extra) == 1 and extra[0].startswith(f"vad_scores/{COLD_DAY}/scores/") and "a_quiet__room.wav" in extra[0]
    records = [json.loads(p.read_text()) for p in (storage_root / "gpu_work" / COLD_DAY).rglob("*.commit.json")]
    assert [r["units"] for r in records] == [["a_quiet__room.wav"]]  # the flight done before the fault is kept


# -- unit identity ----------------------------------------------------------------------------------------------

@pytest.mark.e2e
def test_two_long_keys_sharing_their_first_200_characters_get_two_units(tmp_path, lock_dir):
    """Finding 3. Before: one unit_id for both (slug cut at 200), one file's transcript on both rows, the other never
    decoded. Now: a slug cut to fit plus a hash of the full key, for every key; both units decode their own audio."""
    from batch_assets.ingest.units import MAX_UNIT_ID, unit_id, unit_ids

    folder = "f" * 120
    keys = [f"{folder}/{'x' * 100}_{tail}.wav" for tail in ("one", "two")]
    partition = tmp_path / "source" / COLD_DAY
    for key, sample in zip(keys, ("meetings/standup.wav", "silence/empty_room.wav"), strict=True):
        (partition / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE / sample, partition / key)
    resources = make_resources(tmp_path / "storage", lock_dir, source=tmp_path / "source")
    assert materialize_partition(resources, COLD_DAY).success
    units = resources["storage"].read_parquet("transcripts", COLD_DAY, "units")
    assert units["unit_id"].n_unique() == 2 and all(len(u) <= MAX_UNIT_ID for u in units["unit_id"])
    assert sorted(units["result_class"]) == ["silent", "transcribed"]  # each read its own audio
    # stable: an id depends on its own key only, whatever else the day holds
    assert unit_id("a__b.wav") == unit_ids(["a__b.wav", "a/b.wav"])[0] == unit_ids(["a__b.wav"])[0]
    assert unit_ids(["a/b.wav", "a__b.wav"]) == ["a__b.wav", unit_id("a__b.wav")] and unit_id("a__b.wav") != "a__b.wav"
    assert unit_id("calls/2026/support_call.flac") == "calls__2026__support_call.flac"  # plain keys keep their ids


@pytest.mark.parametrize("char", ["\x7f", "\x85", "\u2028", "\u2029", "\n", "\u202e"])
def test_control_and_separator_characters_are_refused_with_a_reason(char):
    """Finding 7: DEL, C1 controls, U+2028 and bidi overrides passed `key_problem`."""
    from batch_assets.ingest.units import key_problem

    problem = key_problem(f"calls/a{char}b.wav")
    assert problem and f"U+{ord(char):04X}" in problem and char not in problem  # named, and escaped in the reason


@pytest.mark.e2e
def test_skipped_keys_are_logged_escaped(tmp_path, lock_dir):
    """Finding 7: a newline in a key injected a log line."""
    day = tmp_path / "source" / COLD_DAY
    day.mkdir(parents=True)
    shutil.copy(SAMPLE / "silence" / "empty_room.wav", day / "room.wav")
    (day / "notes\nFORGED LINE.txt").write_text("not audio")
    from batch_assets.ingest.assets import fetched_audio

    resources = make_resources(tmp_path / "storage", lock_dir, source=tmp_path / "source")
    instance = dg.DagsterInstance.ephemeral()
    result = dg.materialize([fetched_audio], partition_key=COLD_DAY, resources=resources, instance=instance)
    logged = [e.user_message for e in instance.all_logs(result.run_id) if "skipped" in e.user_message]
    assert logged and all("\n" not in m for m in logged) and "'notes\\nFORGED LINE.txt'" in logged[0], logged


# -- every read is the read that was listed ---------------------------------------------------------------------

@pytest.mark.e2e
def test_a_file_swapped_after_listing_is_not_decoded(tmp_path, lock_dir):
    """Findings 4 and 5. Before: `call::1.wav` decoded its sibling `call`; a file swapped for a symlink out of the
    partition, or for other audio, between `fetched_audio` and the GPU step that decodes it was decoded silently."""
    from batch_assets.definitions import all_assets
    from batch_assets.gate.compare import _undecoded_s

    day = tmp_path / "source" / COLD_DAY
    day.mkdir(parents=True)
    for name, sample in (("call::1.wav", "meetings/standup.wav"), ("linked.wav", "meetings/standup.wav"),
                         ("swapped.wav", "meetings/standup.wav"), ("kept.wav", "silence/empty_room.wav")):
        shutil.copy(SAMPLE / sample, day / name)
    shutil.copy(SAMPLE / "silence" / "empty_room.wav", day / "call")  # the sibling a URL chain would open
    outside = tmp_path / "outside.wav"
    shutil.copy(SAMPLE / "meetings" / "standup.wav", outside)  # the very same bytes, outside the partition
    resources = make_resources(tmp_path / "storage", lock_dir, source=tmp_path / "source")
    fetch = dg.materialize(all_assets, selection=["fetched_audio"], partition_key=COLD_DAY, resources=resources)
    assert fetch.success
    (day / "linked.wav").unlink()
    (day / "linked.wav").symlink_to(outside)
    shutil.copy(SAMPLE / "meetings" / "planning.mp3", day / "swapped.wav")
    rest = dg.AssetSelection.all() - dg.AssetSelection.assets("fetched_audio")
    assert dg.materialize(all_assets, selection=rest, partition_key=COLD_DAY, resources=resources).success
    units = resources["storage"].read_parquet("transcripts", COLD_DAY, "units")
    by_unit = {r["unit_id"]: r for r in units.iter_rows(named=True)}
    assert by_unit["call__1.wav-" + by_unit_suffix(by_unit, "call__1.wav")]["result_class"] == "transcribed"
    assert by_unit["linked.wav"]["result_class"] == "changed_since_listed"
    assert "symlink" in by_unit["linked.wav"]["reason"]
    assert by_unit["swapped.wav"]["result_class"] == "changed_since_listed"
    assert "now " in by_unit["swapped.wav"]["reason"] and "listed " in by_unit["swapped.wav"]["reason"]
    assert by_unit["kept.wav"]["result_class"] == "silent"
    # `call::1.wav` decoded its own audio (the standup call), not its sibling `call` (the empty room)
    manifest = resources["storage"].read_parquet("fetched_audio", COLD_DAY, "manifest")
    call = manifest.filter(pl.col("relative_key") == "call::1.wav").row(0, named=True)
    assert by_unit[call["unit_id"]]["duration_s"] == pytest.approx(call["duration_s"], abs=0.01)
    # the gate's "no lost speech" counts a changed unit's listed audio as not heard
    assert _undecoded_s({"result_class": "changed_since_listed", "declared_duration_s": 49.8,
                         "duration_s": 49.8}) == 49.8


def by_unit_suffix(by_unit: dict, prefix: str) -> str:
    """The hash part of the one unit id starting with `prefix` (a key that is not plain gets one)."""
    (match,) = [u for u in by_unit if u.startswith(prefix + "-")]
    return match[len(prefix) + 1 :]


# -- the lease's edges ------------------------------------------------------------------------------------------


def test_an_unreadable_lease_record_expires_with_its_ttl(tmp_path):
    """Finding 6a. Before: an empty newest record (a crash before the record reached the disk) blocked its partition
    for ever ("run ?"). Now it counts as held while younger than the ttl, and as expired (logged) once older."""
    from batch_assets.storage.lease import LeaseHeld, PartitionLease

    storage = StorageResource(storage_url=str(tmp_path))
    record = tmp_path / ".leases" / COLD_DAY / "gen-000001.json"
    record.parent.mkdir(parents=True)
    record.write_bytes(b"")
    with pytest.raises(LeaseHeld, match="run \\?"):
        PartitionLease(storage, COLD_DAY, holder="run-b", ttl_s=60).acquire(wait_s=0)
    old = time.time() - 120
    os.utime(record, (old, old))
    logged: list[str] = []
    lease = PartitionLease(storage, COLD_DAY, holder="run-b", ttl_s=60)
    lease.acquire(wait_s=0, log=logged.append)
    assert lease.generation == 2
    assert "gen-000001.json is unreadable" in logged[0] and "treated as expired" in logged[0], logged
    assert json.loads((record.parent / "gen-000002.json").read_bytes())["holder"] == "run-b"  # written whole, read back
    with S3Server() as s3:  # on S3 the record's age is its LastModified
        s3.client().create_bucket(Bucket="unreadable-lease")
        s3.client().put_object(Bucket="unreadable-lease", Key=f"out/.leases/{COLD_DAY}/gen-000001.json",
                               Body=b"{\"holder\": ")
        lease = PartitionLease(s3.storage("unreadable-lease"), COLD_DAY, holder="run-b", ttl_s=1.0)
        time.sleep(1.5)
        lease.acquire(wait_s=0, log=logged.append)
        assert lease.generation == 2 and "unreadable" in logged[-1]


def test_a_store_that_ignores_if_none_match_lets_only_one_writer_on(tmp_path):
    """Finding 6b. Before: on a store that ignores `If-None-Match`, two runs both "won" generation 1. Now the record
    is read back after it is created, and every write is fenced: the writer whose record did not land cannot write."""
    from batch_assets.storage.lease import LeaseLost, PartitionLease

    with S3Server() as s3:
        s3.client().create_bucket(Bucket="racing-leases")
        honoured = [PartitionLease(s3.storage("racing-leases"), COLD_DAY, holder=h)
                    for h in ("run-a", "run-b")]
        assert honoured[0]._claim(1) and not honoured[1]._claim(1)  # a store that honours it: one winner
        s3.proxy.ignore_if_none_match = True
        first, second = (PartitionLease(s3.storage("racing-leases", faulty=True), FIRST_DAY, holder=h)
                         for h in ("run-a", "run-b"))
        assert first._claim(1)  # both listed generation 0 as free, then both created generation 1:
        assert second._claim(1)  # the store let the second replace the first's record
        first.generation = second.generation = 1
        with pytest.raises(LeaseLost, match="held by run run-b"):
            first.check()
        second.check()
        local = StorageResource(storage_url=str(tmp_path))
        with pytest.raises(LeaseLost), local.replace_partition("transcripts", FIRST_DAY, fence=first.check) as out:
            out.write_parquet(pl.DataFrame({"unit_id": ["u"]}), "units")
    assert not (tmp_path / "transcripts").exists()  # the fenced writer wrote nothing


def test_a_holder_whose_lease_was_taken_over_writes_nothing_more(tmp_path):
    """Finding 6c. Before: a holder whose lease was taken over (paused past its ttl) kept renewing and writing."""
    from batch_assets.gpu.outputs.commits import FlightCommits
    from batch_assets.storage.lease import LeaseLost, PartitionLease

    storage = StorageResource(storage_url=str(tmp_path))
    paused = PartitionLease(storage, COLD_DAY, holder="run-a", ttl_s=0.5)
    paused.acquire()
    time.sleep(0.7)  # paused past its ttl: its record expires
    taker = PartitionLease(storage, COLD_DAY, holder="run-b", ttl_s=60)
    taker.acquire()
    assert taker.generation == 2
    record = (tmp_path / ".leases" / COLD_DAY / "gen-000001.json").read_bytes()
    paused.renew()  # what its renewal thread does: it sees the takeover and stops
    assert (tmp_path / ".leases" / COLD_DAY / "gen-000001.json").read_bytes() == record
    with pytest.raises(LeaseLost, match="generation 2 replaced its generation 1"), \
            storage.replace_partition("transcripts", COLD_DAY, fence=paused.check) as out:
        out.write_parquet(pl.DataFrame({"unit_id": ["u"]}), "units")
    with pytest.raises(LeaseLost):
        FlightCommits(storage, COLD_DAY, "run-a", _identity(), fence=paused.check).commit("flight-0000", [], "fp")
    assert not (tmp_path / "transcripts").exists() and not (tmp_path / "gpu_work").exists()
    taker.check()


def _engine_event(instance, run, pid: int, timestamp: float, **identity) -> None:
    """An engine event naming a process, as Dagster's run worker writes one, recorded at `timestamp`."""
    import logging

    from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData
    from dagster._core.events.log import EventLogEntry

    metadata = {"pid": dg.MetadataValue.int(pid)} | {
        k: (dg.MetadataValue.int(v) if isinstance(v, int) else dg.MetadataValue.text(v)) for k, v in identity.items()}
    event = DagsterEvent(DagsterEventType.ENGINE_EVENT.value, job_name=run.job_name, message="process",
                         event_specific_data=EngineEventData(metadata))
    instance.store_event(EventLogEntry(error_info=None, level=logging.INFO, user_message="process", run_id=run.run_id,
                                       timestamp=timestamp, dagster_event=event, job_name=run.job_name))


def test_a_wall_clock_step_does_not_declare_a_live_run_dead(tmp_path):
    """Finding 6d. Before: 10 s of forward wall-clock step made a live run's process look younger than its record
    (a reused pid), so the run was failed and its lease freed. Now liveness is the process's identity from /proc."""
    from dagster._core.storage.dagster_run import DagsterRun

    from batch_assets.orchestration.dead_runs import free_dead_runs, process_identity

    (tmp_path / "home").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "home"))
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        started_wall = time.time()
        live = instance.add_run(DagsterRun(job_name="transcribe_partition", run_id="live-run",
                                           status=dg.DagsterRunStatus.STARTED))
        _engine_event(instance, live, worker.pid, started_wall - 10)  # the clock stepped 10 s after the record
        identity = process_identity(worker.pid)
        _engine_event(instance, live, worker.pid, started_wall - 10, pid_start_ticks=identity["start_ticks"],
                      boot_id=identity["boot_id"])
        reused = instance.add_run(DagsterRun(job_name="transcribe_partition", run_id="reused-pid-run",
                                             status=dg.DagsterRunStatus.STARTED))
        _engine_event(instance, reused, worker.pid, started_wall, pid_start_ticks=identity["start_ticks"] - 1000,
                      boot_id=identity["boot_id"])  # a process of that pid that started earlier: not this one
        assert free_dead_runs(instance, print) == ["reused-pid-run"]
        assert instance.get_run_by_id("live-run").status == dg.DagsterRunStatus.STARTED
    finally:
        worker.kill()
        worker.wait()
    assert free_dead_runs(instance, print) == ["live-run"]  # once its process is really gone
    # issue 65: a run an operator's Ctrl-C marked CANCELING, then its process killed before it ended: canceled
    canceling = instance.add_run(DagsterRun(job_name="transcribe_partition", run_id="canceling-run",
                                            status=dg.DagsterRunStatus.CANCELING))
    _engine_event(instance, canceling, worker.pid, started_wall, pid_start_ticks=identity["start_ticks"],
                  boot_id=identity["boot_id"])
    assert free_dead_runs(instance, print) == ["canceling-run"]
    assert instance.get_run_by_id("canceling-run").status == dg.DagsterRunStatus.CANCELED


# -- decoding in bounded memory ---------------------------------------------------------------------------------

def test_decoding_holds_about_the_decoded_mono_audio(tmp_path):
    """Finding 7. Before: a 180 s, 8-channel, 48 kHz WAV took +406 MB to decode (bytes, multichannel float, mono
    copies). Now it streams: at most 1.2x the 16 kHz mono result, identical to decoding the whole signal at once."""
    import tracemalloc

    from batch_assets.source.decode import decode_file, to_target

    path = tmp_path / "eight_channels.wav"
    with sf.SoundFile(path, "w", 48000, 8, "PCM_16") as handle:
        rng = np.random.default_rng(0)
        for _ in range(180):
            handle.write((0.1 * rng.standard_normal((48000, 8))).astype(np.float32))
    tracemalloc.start()
    decoded, info = decode_file(str(path), ".wav")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (info.sample_rate, info.channels, info.frames) == (48000, 8, 180 * 48000)
    print(f"decode of a {path.stat().st_size / 1e6:.0f} MB 8-channel WAV: peak {peak / 1e6:.1f} MB for "
          f"{decoded.nbytes / 1e6:.1f} MB of 16 kHz mono ({peak / decoded.nbytes:.2f}x)")
    assert peak <= 1.2 * decoded.nbytes
    samples, rate = sf.read(str(path), dtype="float32", always_2d=True)
    assert np.array_equal(decoded, to_target(samples, rate))


@pytest.mark.e2e
def test_a_local_name_that_is_not_utf8_is_refused_and_the_manifest_written(tmp_path, lock_dir):
    """A file name with bytes that are not UTF-8 is `rejected_key` (the reason names them), and the manifest, which
    must hold its key, is still written."""
    from batch_assets.ingest.assets import fetched_audio

    day = tmp_path / "source" / COLD_DAY
    day.mkdir(parents=True)
    shutil.copy(SAMPLE / "silence" / "empty_room.wav", day / "room.wav")
    with open(os.path.join(os.fsencode(day), b"bad\xff.wav"), "wb") as handle:
        handle.write((SAMPLE / "silence" / "empty_room.wav").read_bytes())
    resources = make_resources(tmp_path / "storage", lock_dir, source=tmp_path / "source")
    assert dg.materialize([fetched_audio], partition_key=COLD_DAY, resources=resources).success
    manifest = resources["storage"].read_parquet("fetched_audio", COLD_DAY, "manifest")
    bad = manifest.filter(pl.col("relative_key") == "bad\\xff.wav").row(0, named=True)
    assert bad["result_class"] == "rejected_key" and "not UTF-8" in bad["reason"]
    assert manifest.filter(pl.col("relative_key") == "room.wav")["result_class"].to_list() == ["ok"]
