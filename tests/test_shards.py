"""Production-scale GPU work: shards, flight commits, one writer per partition.

Real runs on real Dagster instances, real processes killed with SIGKILL, the real lease over the local
filesystem and over S3 (moto). The kill -9 and re-execution cases run end to end in tests/test_deployed.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from batch_assets.gpu.steps.shards import plan_shards
from batch_assets.storage.lease import LeaseHeld, PartitionLease, _exclusive_create
from batch_assets.storage.resource import SAMPLE_PARTITION, StorageResource

from .conftest import (
    FLIGHTS_OF_ONE,
    assert_same_results,
    make_resources,
    materialize_partition,
    tables_of,
)
from .s3_server import S3Server

P = SAMPLE_PARTITION


def test_shards_are_whole_flights_in_plan_order_and_deterministic():
    flights = [("f0", 100.0), ("f1", 50.0), ("f2", 300.0), ("f3", 10.0), ("f4", 10.0)]
    assert plan_shards(flights, 160.0) == [["f0", "f1"], ["f2"], ["f3", "f4"]]
    assert plan_shards(flights, 160.0) == plan_shards(list(flights), 160.0)
    assert plan_shards(flights, 10_000.0) == [["f0", "f1", "f2", "f3", "f4"]]
    assert plan_shards([], 100.0) == [[]]


def test_a_long_units_windows_stay_in_one_shard():
    """Issue 64: a unit's windows could fall into two shards, and each step read the whole object again."""
    from batch_assets.gpu.steps.resume import PlannedFlight, shards_of

    planned = [PlannedFlight("f0", 100.0, 1, "a"), PlannedFlight("f1", 100.0, 1, "b", ("long",)),
               PlannedFlight("f2", 100.0, 1, "c", ("long",)), PlannedFlight("f3", 100.0, 2, "d", ("long", "next")),
               PlannedFlight("f4", 100.0, 1, "e", ("next",)), PlannedFlight("f5", 100.0, 1, "f")]
    assert plan_shards([(f.flight_id, f.audio_s) for f in planned], 150.0) == [[f"f{i}"] for i in range(6)]
    assert shards_of(planned, 150.0) == [["f0"], ["f1", "f2", "f3", "f4"], ["f5"]]
    assert shards_of(planned, 250.0) == [["f0", "f1", "f2", "f3", "f4"], ["f5"]]


@pytest.mark.e2e
def test_a_partition_in_several_shards_gives_the_same_tables_as_one_shard(flights_of_one, tmp_path, lock_dir):
    resources = make_resources(tmp_path / "storage", lock_dir)
    config = {"ops": FLIGHTS_OF_ONE | {"gpu_section": {"config": {"shard_audio_seconds": 60.0}}}}
    result = materialize_partition(resources, run_config=config)
    assert result.success
    steps = {e.step_key for e in result.all_events
             if e.event_type_value == "STEP_SUCCESS" and "gpu_shard[" in e.step_key}
    assert len(steps) >= 3, steps
    meta = next(e.materialization.metadata for e in result.get_asset_materialization_events()
                if e.asset_key.to_user_string() == "transcripts")
    assert meta["shards"].value == len(steps) and "| step | flights |" in meta["shard_report"].value
    assert_same_results(tables_of(flights_of_one), tables_of(resources["storage"]))
    # the commits are gone once the tables are in place; only the record that this run assembled the partition stays
    work = tmp_path / "storage" / "gpu_work" / P
    assert [p.name for p in work.rglob("*") if p.is_file()] == [f"{result.run_id}.assembled.json"]
    values = tmp_path / "storage" / ".dagster-io"  # kept until a later run sees this one's success
    assert {p.relative_to(values).parts[0] for p in values.rglob("*.json")} == {result.run_id}


@pytest.mark.e2e
def test_a_second_writer_waits_for_or_names_the_run_writing_the_partition(tmp_path, lock_dir):
    resources = make_resources(tmp_path / "storage", lock_dir)
    storage = resources["storage"]
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from batch_assets.storage.lease import PartitionLease
        from batch_assets.storage.resource import StorageResource
        lease = PartitionLease(StorageResource(storage_url={str(storage.storage_url)!r}), {P!r},
                               holder="other-run", ttl_s=6)
        with lease.held():
            print("held", flush=True)
            time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    try:
        config = {"ops": {"fetched_audio": {"config": {"lease_wait_seconds": 1.0}}}}
        refused = materialize_partition(resources, run_config=config, raise_on_error=False)
        assert not refused.success
        failure = next(str(e.event_specific_data.error) for e in refused.all_events
                       if e.event_type_value == "STEP_FAILURE")
        assert f"partition {P} is being written by run other-run" in failure
        # waited lease_wait_seconds once, then failed: a step retry would wait again, and again (docs/operations.md)
        assert not [e for e in refused.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
        assert not (tmp_path / "storage" / "fetched_audio").exists()
    finally:
        holder.send_signal(signal.SIGKILL)  # the holder dies without releasing: its lease expires (ttl 6 s)
        holder.wait()
    config = {"ops": {"fetched_audio": {"config": {"lease_wait_seconds": 60.0}}}}
    result = materialize_partition(resources, run_config=config)
    assert result.success
    units = storage.read_parquet("transcripts", P, "units")
    assert units["unit_id"].is_unique().all() and len(units) == 5


def test_the_lease_over_s3_is_exclusive_and_renewed(tmp_path):
    with S3Server() as s3:
        s3.client().create_bucket(Bucket="leases")
        storage = s3.storage("leases")
        first = PartitionLease(storage, P, holder="run-a", ttl_s=3.0)
        second = PartitionLease(storage, P, holder="run-b", ttl_s=3.0)
        with first.held():
            with pytest.raises(LeaseHeld, match="being written by run run-a"):
                second.acquire(wait_s=3.5, poll_s=0.5)  # run-a renews every ttl/3: its lease never expires while held
        second.acquire(wait_s=0.0)  # released: free at once
        assert second.generation == 2
        # a finished holder (known to the instance) frees its lease at once, however long its ttl
        third = PartitionLease(storage, P, holder="run-c", holder_alive=lambda run: run != "run-b")
        third.acquire(wait_s=0.0)
        assert third.generation == 3
        # the loser of a race for the same generation gets False (then waits), never an error
        fs, path = storage.filesystem("s3://leases/out/.leases/race/gen-000001.json")
        assert _exclusive_create(fs, path, b"{}") and not _exclusive_create(fs, path, b"{}")
    fs, path = StorageResource(storage_url=str(tmp_path)).filesystem(
        str(tmp_path / ".leases" / "race" / "gen-000001.json"))
    assert _exclusive_create(fs, path, b"{}") and not _exclusive_create(fs, path, b"{}")
    assert sorted(p.name for p in (tmp_path / ".leases" / "race").iterdir()) == ["gen-000001.json"]  # no temporary left


def test_two_steps_of_one_run_taking_over_a_dead_runs_lease_both_hold_it(tmp_path):
    """A re-execution's shard steps start together and both find the dead run's lease: one takes it over, and the
    other, whose claim lost that race, reads the lease again and finds it its own run's (it once failed naming the
    dead run, which the step's retry 30 s later hid)."""
    storage = StorageResource(storage_url=str(tmp_path / "storage"))
    dead = PartitionLease(storage, P, holder="dead-run")
    dead.acquire()
    sibling = PartitionLease(storage, P, holder="new-run", holder_alive=lambda run: run != "dead-run")

    def alive_after_the_sibling_took_it(run: str) -> bool:  # read the dead run's record; the sibling claims now
        if sibling.generation is None:
            sibling.acquire()
        return run != "dead-run"

    step = PartitionLease(storage, P, holder="new-run", holder_alive=alive_after_the_sibling_took_it)
    step.acquire()  # wait 0: no waiting, as a shard step
    assert step.generation == sibling.generation == 2


def test_a_waiting_writer_reads_a_lease_renewed_under_it(tmp_path):
    """The holder's renewal can land between a waiting writer's requests: the waiter reads the record whole (one
    GET), never half of one version and half of the next (s3fs's HEAD then ranged GET raised FileExpired there)."""
    with S3Server() as s3:
        s3.client().create_bucket(Bucket="renewals")  # moto keeps its buckets for the process
        holder = PartitionLease(s3.storage("renewals"), P, holder="run-a")
        waiter = PartitionLease(s3.storage("renewals", faulty=True), P, holder="run-b")
        holder.acquire()
        renewed = []

        def renew_once(key: str) -> None:
            if "/.leases/" in key and not renewed:
                renewed.append(key)
                holder.renew()  # a new version of the record (a later expiry), so a new ETag
        s3.proxy.before_get = renew_once
        with pytest.raises(LeaseHeld, match="being written by run run-a"):
            waiter.acquire(wait_s=0.0)
        assert renewed == [f"renewals/out/.leases/{P}/gen-000001.json"]
        holder.release()
        waiter.acquire(wait_s=0.0)
        assert waiter.generation == 2


def test_a_failed_renewal_is_retried_and_logged(tmp_path):
    with S3Server() as s3:
        s3.client().create_bucket(Bucket="renewals-denied")  # moto keeps its buckets for the process
        storage = s3.storage("renewals-denied", faulty=True)
        record = f"s3://renewals-denied/out/.leases/{P}/gen-000001.json"
        lease, logged = PartitionLease(storage, P, holder="run-a", ttl_s=0.6), []

        def expiry() -> float:
            return json.loads(storage.read_bytes(record))["expires_unix"]

        def soon(condition) -> bool:  # renewals every 0.2 s; a loaded machine gets 20 s
            deadline = time.monotonic() + 20
            while not condition() and time.monotonic() < deadline:
                time.sleep(0.05)
            return condition()
        with lease.held(log=logged.append):
            s3.proxy.read_only_prefixes.add("renewals-denied/out/.leases/")  # every renewal's PUT is refused
            try:
                assert soon(lambda: len(lease.missed_renewals) >= 2)
                assert not logged  # kept for the end of the block: a step's logger is not called from the renewer
                refused_at = expiry()
            finally:
                s3.proxy.read_only_prefixes.clear()
            assert soon(lambda: expiry() > refused_at)  # retried, and renewed once the store took writes
        assert len(logged) == 1 and "renewal(s) of the lease failed and were retried" in logged[0]
        assert "PermissionError" in logged[0]


def _identity(**switches):
    """The identity of the builtin routing's commits, with `switches` over every switch's default."""
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.switches import SWITCHES

    return GpuResource().commit_identity({s.name: s.default for s in SWITCHES} | switches)


def test_a_commit_cut_off_halfway_is_not_counted(tmp_path):
    from batch_assets.gpu.outputs.commits import FlightCommits

    storage = StorageResource(storage_url=str(tmp_path))
    commits = FlightCommits(storage, P, "root-run", _identity())
    assert commits.problem("flight-0000", "fp-a") == "not committed"
    # a flight whose units all failed upstream: empty fragments, still a commit
    record = commits.commit("flight-0000", [], "fp-a")
    assert commits.problem("flight-0000", "fp-a") is None and len(record["files"]) == 6
    assert "committed for another plan" in commits.problem("flight-0000", "fp-b")  # prepared_flights changed since
    fragment = pathlib.Path(next(iter(record["files"])))
    fragment.write_bytes(fragment.read_bytes()[:10])  # the kill landed while this file was being replaced
    assert commits.problem("flight-0000", "fp-a").startswith("commit cut off")
    commits.commit("flight-0000", [], "fp-a")  # redone: overwritten, not appended
    assert commits.problem("flight-0000", "fp-a") is None
    assert commits.tables({"flight-0000": "fp-a"})["outcomes"].is_empty()
    (tmp_path / "gpu_work" / P / "root-run" / "flight-0000.commit.json").unlink()  # fragments written, record not yet
    assert commits.problem("flight-0000", "fp-a") == "not committed"
    with pytest.raises(RuntimeError, match="no valid commit"):
        commits.tables({"flight-0000": "fp-a"})


def test_a_commit_holding_a_unit_it_could_not_read_is_not_reused_by_another_run(tmp_path):
    """Issue 64: a GPU step that could not read an object (`fetch_failed` after its retries, or
    `changed_since_listed`) committed it, and every later run reused that commit: the unit was never read again.
    Its own run still assembles from it; another run reads the flight again."""
    from batch_assets.gpu.outputs.commits import FlightCommits
    from batch_assets.gpu.section.flight import UnitOutcome
    from batch_assets.schema.results import ResultClass

    storage = StorageResource(storage_url=str(tmp_path))
    stopped = FlightCommits(storage, P, "stopped-run", _identity())
    unread = UnitOutcome("u-lost", "flight-0000", 0.0, ResultClass.FETCH_FAILED, "read failed after 4 attempts")
    record = stopped.commit("flight-0000", [*HEARD_EN, unread], "fp")
    stopped.commit("flight-0001", HEARD_EN, "fp")
    assert record["unread"] == ["u-lost"] and stopped.problem("flight-0000", "fp") is None
    later = FlightCommits(storage, P, "later-run", _identity())
    assert later.problem("flight-0001", "fp") is None and later.reused == {"flight-0001": "stopped-run"}
    why = later.problem("flight-0000", "fp")
    assert why is not None and "could not read" in why and "u-lost" in why and "flight-0000" not in later.reused


def test_a_commit_counts_only_under_the_deployment_identity_it_recorded(tmp_path):
    """What a resume after a redeploy compares (gpu/outputs/commit_identity.py): a model (by name, or by the checksum
    of its file at the same path), a result-changing switch, the schema or package version; never an exact lever."""
    from batch_assets.gpu.outputs.commit_identity import RESULT_SWITCHES, CommitIdentity
    from batch_assets.gpu.outputs.commits import FlightCommits, why_kind
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.models.builtin import TDT_WEIGHTS
    from batch_assets.switches import EXACT_SWITCHES

    storage = StorageResource(storage_url=str(tmp_path))
    friday = _identity()
    FlightCommits(storage, P, "root-run", friday).commit("flight-0000", HEARD_EN, "fp")
    judged = lambda identity: FlightCommits(storage, P, "root-run", identity).problem("flight-0000", "fp")  # noqa: E731
    assert judged(_identity(**{name: False for name in EXACT_SWITCHES})) is None  # exact levers: reused
    assert judged(friday) is None
    copy = tmp_path / "models" / "tiny-tdt.nemo"  # the same model under another name
    copy.parent.mkdir()
    copy.write_bytes(TDT_WEIGHTS.read_bytes())
    switches = {s: s == "channel_reading_enabled" for s in RESULT_SWITCHES}  # the defaults
    why = judged(GpuResource(asr_model=str(copy)).commit_identity(switches))
    assert why.startswith("made under another deployment (asr en: builtin:tiny-tdt (sha256 ") and str(copy) in why
    assert why_kind(why) == "made under another deployment: asr en"
    FlightCommits(storage, P, "root-run", GpuResource(asr_model=str(copy)).commit_identity(switches)).commit(
        "flight-0000", HEARD_EN, "fp")
    copy.write_bytes(copy.read_bytes()[:-1] + b"x")  # retrained or replaced in place: same path, other bytes
    os.utime(copy, ns=(copy.stat().st_atime_ns, copy.stat().st_mtime_ns + 10**9))  # a coarse clock: still newer
    changed = judged(GpuResource(asr_model=str(copy)).commit_identity(switches))
    assert changed is not None and why_kind(changed) == "made under another deployment: asr en"
    other = GpuResource(asr_model=str(copy)).commit_identity(switches)
    FlightCommits(storage, P, "root-run", other).commit("flight-0000", HEARD_EN, "fp")
    for field, value in (("schema_version", "older"), ("package_version", "0.0.1"), ("word_confidence", False),
                         ("segmentation_batch_size", 8), ("device_type", "cuda"), ("embedding_batch_size", 4),
                         ("asr_batch_size", 64), ("libraries", {**other.libraries, "torch": "2.11.0"})):
        changed = judged(CommitIdentity(**{**vars(other), field: value}))
        assert changed is not None and field.replace("_", " ").lower() in changed.lower(), changed
    assert other.libraries["torch"] and other.libraries["pyannote.audio"] and other.libraries["nemo_toolkit"]
    changed = judged(GpuResource(asr_model=str(copy)).commit_identity(switches | {"tf32_enabled": True}))
    assert why_kind(changed) == "made under another deployment: tf32_enabled"
    # issue 65: made where a NeMo fix could not be installed (its source changed): its own run's, never another's
    FlightCommits(storage, P, "root-run", other).commit("flight-0000", HEARD_EN, "fp", ("tdt token durations",))
    assert judged(other) is None
    assert "without the NeMo fixes tdt token durations" in FlightCommits(storage, P, "next-run", other).problem(
        "flight-0000", "fp")
    FlightCommits(storage, P, "root-run", other).commit("flight-0000", HEARD_EN, "fp")
    # a commit from before commits recorded their identity
    record = tmp_path / "gpu_work" / P / "root-run" / "flight-0000.commit.json"
    record.write_text(json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "identity"}))
    assert "records no identity" in judged(other)


def _heard(unit_id: str, language: str | None, source: str | None = "detected"):
    from batch_assets.gpu.section.flight import UnitOutcome
    from batch_assets.schema.results import ResultClass

    return UnitOutcome(unit_id, "flight", 1.0, ResultClass.SILENT if language is None else ResultClass.FAILED,
                       language=language, language_source=source if language else None)


HEARD_EN = [_heard("u-en", "en")]


def test_a_flights_commit_records_the_models_its_units_used_and_only_those_redo_it(tmp_path):
    """Issue 56: changing the `ja` model redoes the flights that heard Japanese, not the others; a language heard
    without a model is recorded as none (a model added for it redoes the flight); language identification counts
    only where a language was detected; the device type counts where a GPU step judges."""
    from batch_assets.gpu.outputs.commits import FlightCommits
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.models.names import TINY_TDT
    from batch_assets.switches import SWITCHES

    storage = StorageResource(storage_url=str(tmp_path))
    switches = {s.name: s.default for s in SWITCHES}
    before = GpuResource(asr_models={"en": TINY_TDT, "ja": "builtin:tiny-tdt-ja"}).commit_identity(switches)
    commits = FlightCommits(storage, P, "root-run", before)
    commits.commit("flight-en", [_heard("u-1", "en"), _heard("u-2", None)], "fp")
    commits.commit("flight-ja", [_heard("u-3", "ja", "sidecar"), _heard("u-4", "xx", "run_config")], "fp")
    recorded = json.loads((tmp_path / "gpu_work" / P / "root-run" / "flight-ja.commit.json").read_text())
    assert sorted(recorded["identity"]["models"]) == ["asr ja", "asr xx", "diarization"]
    assert recorded["identity"]["models"]["asr xx"] is None
    judged = lambda resource, flight: FlightCommits(storage, P, "root-run", resource.commit_identity(  # noqa: E731
        switches)).problem(flight, "fp")
    new_ja = GpuResource(asr_models={"en": TINY_TDT, "ja": "builtin:tiny-tdt-de"})
    assert judged(new_ja, "flight-en") is None and "asr ja: builtin:tiny-tdt-ja" in judged(new_ja, "flight-ja")
    with_xx = GpuResource(asr_models={"en": TINY_TDT, "ja": "builtin:tiny-tdt-ja", "xx": TINY_TDT})
    assert judged(with_xx, "flight-en") is None and "asr xx: none -> builtin:tiny-tdt" in judged(with_xx, "flight-ja")
    new_langid = GpuResource(asr_models={"en": TINY_TDT, "ja": "builtin:tiny-tdt-ja"}, language_id_model="other")
    assert "language id" in judged(new_langid, "flight-en") and judged(new_langid, "flight-ja") is None
    on_cuda = dataclasses.replace(before, device_type="cuda")
    assert "device type: None -> cuda" in FlightCommits(storage, P, "root-run", on_cuda).problem("flight-en", "fp")
    # a GPU step on CUDA commits one flight, an earlier one on CPU the other: a CPU step (the assembly, device type
    # None) takes both as valid, and sees the two device types it must refuse to publish together
    FlightCommits(storage, P, "root-run", on_cuda).commit("flight-ja", [_heard("u-3", "ja", "sidecar")], "fp")
    FlightCommits(storage, P, "root-run", dataclasses.replace(before, device_type="cpu")).commit(
        "flight-en", [_heard("u-1", "en")], "fp")
    assembly = FlightCommits(storage, P, "root-run", before)
    assert assembly.problems({"flight-en": "fp", "flight-ja": "fp"}) == {}
    assert assembly.device_types(["flight-en", "flight-ja"]) == {"flight-en": "cpu", "flight-ja": "cuda"}


def test_a_new_run_reuses_another_runs_valid_commits_and_reads_them_where_they_lie(tmp_path):
    """Issue 56: a flight without a commit under this root run takes a valid one of another root run of the
    partition (a stopped run's); one made for another plan or under another identity is not taken; the fragments
    are read from the run that made them."""
    from batch_assets.gpu.outputs.commits import FlightCommits

    storage = StorageResource(storage_url=str(tmp_path))
    stopped = FlightCommits(storage, P, "stopped-run", _identity())
    stopped.commit("flight-0000", HEARD_EN, "fp-0")
    stopped.commit("flight-0001", HEARD_EN, "fp-old")  # the plan changed since for this one
    FlightCommits(storage, P, "tf32-run", _identity(tf32_enabled=True)).commit("flight-0002", HEARD_EN, "fp-2")
    new = FlightCommits(storage, P, "new-run", _identity())
    problems = new.problems({"flight-0000": "fp-0", "flight-0001": "fp-1", "flight-0002": "fp-2"})
    assert problems == {"flight-0001": "not committed", "flight-0002": "not committed"}
    assert new.reused == {"flight-0000": "stopped-run"}
    assert new.fragments(["flight-0000"])["outcomes"]["unit_id"].to_list() == ["u-en"]
    new.commit("flight-0000", [_heard("u-mine", "en")], "fp-0")  # its own commit comes first
    assert new.problem("flight-0000", "fp-0") is None and "flight-0000" not in new.reused
    assert new.fragments(["flight-0000"])["outcomes"]["unit_id"].to_list() == ["u-mine"]


def test_the_code_digest_follows_result_code_not_docstrings_comments_or_the_cli(tmp_path):
    """Issue 56's line (gpu/outputs/commit_identity.py): a docstring, a comment or a CLI edit leaves the code digest
    as it is; a changed line of the ASR code, or a new module in a result room, changes it."""
    import shutil

    import batch_assets
    from batch_assets.gpu.outputs.commit_identity import RESULT_CODE, code_digest, code_text, package_sources

    package = pathlib.Path(batch_assets.__file__).resolve().parent
    copy = tmp_path / "batch_assets"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "weights"))
    first = code_digest(copy)
    transcribe = copy / "gpu" / "asr" / "transcribe.py"
    text = transcribe.read_text()
    transcribe.write_text(text.replace('"""ASR with NeMo TDT', '"""Speech recognition with NeMo TDT', 1)
                          .replace("SAMPLE_RATE = 16_000", "SAMPLE_RATE = 16_000  # Hz"))
    commands = copy / "cli" / "commands.py"
    commands.write_text(commands.read_text() + "\n\ndef added_to_the_cli():\n    return 1\n")
    assert code_digest(copy) == first
    # issue 65: the module's text, not `ast.dump` (which Python 3.12 writes otherwise than 3.11)
    assert "Module(" not in code_text(transcribe) and "SAMPLE_RATE = 16_000" in code_text(transcribe)
    assert "Speech recognition" not in code_text(transcribe) and "# Hz" not in code_text(transcribe)
    transcribe.write_text(text.replace("SAMPLE_RATE = 16_000", "SAMPLE_RATE = 16_001"))
    assert code_digest(copy) != first
    transcribe.write_text(text)
    (copy / "gpu" / "section" / "new_stage.py").write_text("X = 1\n")
    assert code_digest(copy) != first
    assert all((package / part).exists() for part in RESULT_CODE)
    assert package / "gpu" / "asr" / "transcribe.py" in package_sources()
    assert package / "gpu" / "steps" / "shard_work.py" in package_sources()  # each unit's hints, language, levers
    assert not any(part in ("cli", "orchestration") for p in package_sources() for part in p.relative_to(package).parts)


def test_a_hub_models_identity_is_the_revision_its_cache_resolved(tmp_path, monkeypatch):
    """Issue 56: a Hugging Face name is identified by the snapshot its local cache resolved (offline), in a cache
    laid out as the hub client lays it out (the hub client's own scan reads it); an NGC name by its cached .nemo."""
    import huggingface_hub
    from huggingface_hub import constants

    from batch_assets.models.identity import model_identity

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    name = "nvidia/parakeet-tdt-0.6b-v2"
    assert model_identity(name).revision is None  # not cached: the name alone
    folder = cache / "models--nvidia--parakeet-tdt-0.6b-v2"
    for commit, content in (("a" * 40, b"v1"), ("b" * 40, b"v2")):
        blob = folder / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        snapshot = folder / "snapshots" / commit / "parakeet-tdt-0.6b-v2.nemo"
        snapshot.parent.mkdir(parents=True)
        snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / "main").write_text(commit)
        scanned = huggingface_hub.scan_cache_dir(cache)
        assert not scanned.warnings and commit in {r.commit_hash for repo in scanned.repos for r in repo.revisions}
        assert model_identity(name).revision == commit
        assert huggingface_hub.try_to_load_from_cache(name, "parakeet-tdt-0.6b-v2.nemo", cache_dir=cache) == str(
            snapshot)
    assert "revision bbbbbbbbbbbb" in model_identity(name).text()
    nemo_cache = tmp_path / "nemo"
    monkeypatch.setenv("NEMO_CACHE_DIR", str(nemo_cache))
    assert model_identity("langid_ambernet").sha256 is None
    cached = nemo_cache / "langid_ambernet" / "0123abcd" / "langid_ambernet.nemo"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"ambernet")
    assert model_identity("langid_ambernet").sha256 == hashlib.sha256(b"ambernet").hexdigest()




def test_a_flight_computed_again_never_writes_over_the_score_arrays_published_tables_point_to(tmp_path):
    """Issue 65: run B reused run A's commit and published tables pointing at A's score arrays, then removed A's work
    folder; a later re-execution of A (the UI's re-execute, a retry) found no commit, computed the flight again
    (after a redeploy: other numbers) and wrote over `scores/A/{unit}.npy` under B's tables. Arrays are named by
    their content: other numbers go to another file, the same numbers to the same one."""
    import numpy as np
    from pyannote.core import SlidingWindow, SlidingWindowFeature

    from batch_assets.gpu.diarization.vad import VadResult
    from batch_assets.gpu.outputs.commits import FlightCommits

    storage = StorageResource(storage_url=str(tmp_path))

    def arrays(value: float) -> list[str]:
        outcome = _heard("u-en", "en")
        outcome.vad = VadResult(SlidingWindowFeature(np.full((3, 4, 2), value, np.float32),
                                                     SlidingWindow(duration=5.0, step=0.5)), [(0.0, 1.0)])
        record = FlightCommits(storage, P, "run-a", _identity()).commit("flight-0000", [outcome], "fp")
        return [url for url in record["files"] if url.endswith(".npy")]

    [published] = arrays(0.25)
    [again] = arrays(0.75)
    assert again != published and storage.read_array(published).max() == 0.25  # B's tables still read A's numbers
    assert arrays(0.25) == [published]
