"""Nothing lost, nothing escapes: empty or missing sources, dead runs, signals, symlinks, truncated audio,
permanent storage errors, and the S3 fault proxy itself. Real files, real Dagster instances and runs, real
processes killed for real, a real S3 API (moto) on loopback."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import dagster as dg
import filelock
import polars as pl
import pytest
import soundfile as sf

from batch_assets.gpu.device.lock import lock_path
from batch_assets.gpu.steps.resources import GpuResource, model_loads
from batch_assets.ingest.manifest import build_manifest
from batch_assets.source.fetch import FetchError, RetryPolicy, with_retries
from batch_assets.source.objects import read_once
from batch_assets.storage.resource import REPO_ROOT, StorageResource

from .channel_calls import call_of
from .conftest import SAMPLE_SOURCE, make_resources, materialize_partition
from .partition_sources import SAMPLE, make_source
from .published_arrays import assert_arrays_load
from .s3_server import S3Server

PARTITION = "2026-03-01"
EMPTY_DAY = "2026-03-02"
SHIPPED_DAGSTER_YAML = REPO_ROOT / "dagster_home" / "dagster.yaml"
GPU_STEP_STARTED = 'Started execution of step "gpu_section.gpu_shard['  # a shard's GPU step


def _files(root: pathlib.Path) -> dict[str, str]:
    """Every result file under `root` (relative path -> sha256): the bytes a reader can see (leases and the
    run's step-to-step values, in dot-folders, are bookkeeping)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.relative_to(root).parts[0].startswith(".")}


def _truncated_flac(target: pathlib.Path) -> float:
    """The sample's support call cut in half (header intact, body cut off); returns the declared seconds."""
    data = (SAMPLE / "calls" / "2026" / "support_call.flac").read_bytes()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data[: len(data) // 2])
    return sf.info(str(target)).duration


def _with_storage(resources: dict, **fields) -> dict:
    """The same resources with some storage fields changed (a resource is rebuilt, not copied, for Dagster)."""
    storage = resources["storage"]
    settings = {"source_url": storage.source_url, "storage_url": storage.storage_url} | fields
    return resources | {"storage": StorageResource(**settings)}


def _failure_messages(result) -> str:
    return "\n".join(str(e.event_specific_data.error) for e in result.all_events
                     if e.event_type_value == "STEP_FAILURE")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, lock_dir):
    """A partition with a good unit and a truncated flac, materialized once; then the source goes away."""
    root = tmp_path_factory.mktemp("guard")
    source = make_source(root / "source", {PARTITION: ["meetings/planning.mp3"]})
    declared = _truncated_flac(source / PARTITION / "calls" / "cut.flac")
    (source / EMPTY_DAY).mkdir()
    resources = make_resources(root / "storage", lock_dir, source=source)
    # a batch size no other test uses: this process has not loaded these models, so any load is counted here
    resources["gpu"] = GpuResource(lock_dir=str(lock_dir), device="cpu", embedding_batch_size=5)
    assert materialize_partition(resources, PARTITION).success
    return root, source, resources, declared


@pytest.mark.e2e
def test_a_truncated_flac_is_flagged_with_how_much_decoded(guarded):
    _, _, resources, declared = guarded
    units = resources["storage"].read_parquet("transcripts", PARTITION, "units")
    row = units.filter(pl.col("unit_id") == "calls__cut.flac").row(0, named=True)
    assert row["result_class"] == "truncated"
    assert row["declared_duration_s"] == pytest.approx(declared, abs=5e-4)  # published times are in ms
    assert row["duration_s"] < declared - 1.0
    assert f"decoded {row['duration_s']:.1f} s of {declared:.1f} s declared" in row["reason"]
    assert row["num_words"] > 0  # what decoded was transcribed
    print(f"truncated flac: {row['reason']}")


@pytest.mark.e2e
def test_a_missing_source_root_fails_at_once_and_keeps_everything(guarded, tmp_path):
    root, _, resources, _ = guarded
    before = _files(root / "storage")
    missing = _with_storage(resources, source_url=str(tmp_path / "no-such-folder"))
    result = materialize_partition(missing, PARTITION, raise_on_error=False)
    assert not result.success
    message = _failure_messages(result)
    assert "no-such-folder does not exist" in message and "BATCH_ASSETS_SOURCE_URL" in message
    assert _files(root / "storage") == before


@pytest.mark.e2e
def test_an_emptied_source_is_refused_and_keeps_the_tables_and_arrays(guarded):
    root, source, resources, _ = guarded
    before = _files(root / "storage")
    assert sum(".npy" in path for path in before) >= 2  # flight audio and VAD scores
    hidden = root / "hidden"
    shutil.move(source / PARTITION, hidden)
    (source / PARTITION).mkdir()
    try:
        result = materialize_partition(resources, PARTITION, raise_on_error=False)
    finally:
        shutil.rmtree(source / PARTITION)
        shutil.move(hidden, source / PARTITION)
    assert not result.success
    message = _failure_messages(result)
    assert f"{source / PARTITION} lists 0 units, but the partition's current results have 2" in message
    assert "allow_shrink: true" in message
    assert _files(root / "storage") == before
    restarts = [e for e in result.all_events if e.event_type_value == "STEP_RESTARTED"]
    assert not restarts  # a refusal is not retried


@pytest.mark.e2e
def test_allow_shrink_replaces_the_partition(guarded, tmp_path):
    root, source, resources, _ = guarded
    shrunk = make_source(tmp_path / "source", {PARTITION: ["meetings/planning.mp3"]})
    shrinking = _with_storage(resources, source_url=str(shrunk))
    storage = shrinking["storage"]
    config = {"ops": {"fetched_audio": {"config": {"allow_shrink": True, "shrink_guard_fraction": 0.9}}}}
    assert materialize_partition(shrinking, PARTITION, run_config=config).success
    units = storage.read_parquet("transcripts", PARTITION, "units")
    assert units["unit_id"].to_list() == ["meetings__planning.mp3"]
    scores = root / "storage" / "vad_scores" / PARTITION / "scores"
    assert len(list(scores.iterdir())) == 1  # the replaced version's folder is gone, not left empty
    assert not (root / "storage" / "prepared_flights" / PARTITION / "audio").exists()  # no decoded audio stored


@pytest.mark.e2e
def test_a_first_time_empty_day_materializes_with_a_warning_and_no_model_load(guarded, lock_dir):
    _, source, resources, _ = guarded
    # models this process has not loaded (a batch size of their own): a load would be counted
    resources = resources | {"gpu": GpuResource(lock_dir=str(lock_dir), device="cpu", embedding_batch_size=6)}
    loads = model_loads()
    result = materialize_partition(resources, EMPTY_DAY)
    assert result.success
    assert model_loads() == loads
    evaluation = next(e.asset_check_evaluation_data for e in result.all_events
                      if e.event_type_value == "ASSET_CHECK_EVALUATION"
                      and e.asset_check_evaluation_data.check_name == "partition_has_audio")
    assert evaluation.passed is False and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.metadata["source"].value == str(source / EMPTY_DAY)
    assert resources["storage"].read_parquet("transcripts", EMPTY_DAY, "units").is_empty()


def test_symlinks_never_read_outside_the_partition_and_inside_ones_are_read_once(tmp_path):
    outside = make_source(tmp_path / "outside", {"x": ["meetings/planning.mp3"]}) / "x"
    part = make_source(tmp_path / "source", {PARTITION: ["meetings/planning.mp3"]}) / PARTITION
    (part / "file_link_outside.wav").symlink_to(outside / "meetings" / "planning.mp3")
    (part / "passwd_link.wav").symlink_to("/etc/passwd")
    (part / "folder_link_outside").symlink_to(outside / "meetings")
    (part / "again").symlink_to(part / "meetings")  # a folder inside: its file is listed once, under its real path
    (part / "alias.mp3").symlink_to(part / "meetings" / "planning.mp3")
    manifest, skipped = build_manifest(*StorageResource().filesystem(str(part)), 7200.0, 2)
    rows = {r["relative_key"]: r for r in manifest.iter_rows(named=True)}
    assert rows["meetings/planning.mp3"]["result_class"] == "ok"
    for link in ("file_link_outside.wav", "passwd_link.wav", "folder_link_outside"):
        assert rows[link]["result_class"] == "rejected_key", rows[link]
        assert f"symlink {link!r}" in rows[link]["reason"] and "outside the partition" in rows[link]["reason"]
        assert rows[link]["mtime_ns"] is None and rows[link]["probe_bytes"] is None  # never opened
    assert set(rows) == {"meetings/planning.mp3", "file_link_outside.wav", "passwd_link.wav", "folder_link_outside"}
    reasons = dict(zip(skipped["relative_key"], skipped["reason"], strict=True))
    assert "listed itself: read once" in reasons["alias.mp3"]
    assert "listed under their real path" in reasons["again"]


def test_permanent_read_errors_are_not_retried():
    calls = []

    def denied():
        calls.append(1)
        raise PermissionError("Access Denied")

    with pytest.raises(FetchError, match="permission denied"):
        with_retries(denied, RetryPolicy(attempts=4, base_delay_s=5.0))
    assert len(calls) == 1


@pytest.mark.e2e
def test_read_only_storage_fails_in_seconds_without_loading_models_or_fetching(tmp_path, lock_dir):
    with S3Server() as s3:
        s3.client().create_bucket(Bucket="readonly")
        s3.proxy.read_only_buckets.add("readonly")
        resources = _with_storage(
            make_resources(tmp_path / "unused", lock_dir), storage_url="s3://readonly/out",
            s3_endpoint_url=s3.faulty_endpoint, s3_region="us-east-1", s3_access_key_id="testing",
            s3_secret_access_key="testing", s3_max_attempts=1,
        )
        resources["gpu"] = GpuResource(lock_dir=str(lock_dir), device="cpu", embedding_batch_size=3)
        loads, started = model_loads(), time.perf_counter()
        result = materialize_partition(resources, raise_on_error=False)
        seconds = time.perf_counter() - started
        objects = s3.client().list_objects_v2(Bucket="readonly").get("Contents", [])
    assert not result.success
    assert "s3://readonly/out is not writable" in _failure_messages(result)
    assert model_loads() == loads and s3.proxy.denied >= 1 and not objects
    assert not [e for e in result.all_events if e.event_type_value == "STEP_RESTARTED"]
    print(f"read-only storage: failed after {seconds:.1f} s")


def test_the_fault_proxy_passes_head_and_range_requests_through(tmp_path):
    body = os.urandom(3 * 2**20 + 12345)
    with S3Server(flaky_failures=2) as s3:
        s3.client().create_bucket(Bucket="proxy")
        s3.client().put_object(Bucket="proxy", Key="in/flaky_big.wav", Body=body)
        storage = StorageResource(source_url="s3://proxy/in", storage_url=str(tmp_path),
                                  s3_endpoint_url=s3.faulty_endpoint, s3_region="us-east-1",
                                  s3_access_key_id="testing", s3_secret_access_key="testing", s3_max_attempts=1)
        fs, path = storage.filesystem("s3://proxy/in/flaky_big.wav")
        assert fs.info(path)["size"] == len(body)  # a HEAD through the proxy
        with open(tmp_path / "copy", "w+b") as dest:
            read = read_once(fs, path, None, dest, None, RetryPolicy(attempts=4, base_delay_s=0.01))
        assert (read.size, read.sha256) == (len(body), hashlib.sha256(body).hexdigest())
        assert s3.proxy.failures["/proxy/in/flaky_big.wav"] == 2  # the faults were on, and retried through
        with fs.open(path, "rb", block_size=256 * 1024) as handle:  # ranged GETs, 206 answers
            handle.seek(2**20 + 7)
            assert handle.read(100_000) == body[2**20 + 7 : 2**20 + 7 + 100_000]


# -- real processes: the CLI on an instance with the shipped dagster.yaml -------------------------------------
def _cli_env(tmp_path: pathlib.Path, source: pathlib.Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    shutil.copy(SHIPPED_DAGSTER_YAML, home / "dagster.yaml")
    return os.environ | {
        "DAGSTER_HOME": str(home), "BATCH_ASSETS_SOURCE_URL": str(source),
        "BATCH_ASSETS_STORAGE_URL": str(tmp_path / "storage"), "BATCH_ASSETS_LOCK_DIR": str(tmp_path / "locks"),
        "BATCH_ASSETS_DEVICE": "cpu", "BATCH_ASSETS_TORCH_THREADS": "1", "PYTHONWARNINGS": "ignore",
    }


def _start_cli(env: dict, log: pathlib.Path, *args: str) -> subprocess.Popen:
    """`batch-assets run --verbose`: Dagster's event log live, for the tests that wait for an event in it."""
    return subprocess.Popen([sys.executable, "-m", "batch_assets.cli", "run", "--partition", PARTITION, "--verbose",
                             *args], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(log: pathlib.Path, text: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert proc.poll() is None, f"exited before {text!r}:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} after {timeout} s"
        time.sleep(0.2)


@pytest.mark.e2e
def test_a_run_killed_in_its_gpu_step_does_not_hold_the_gpu_pool(tmp_path):
    """A run killed with SIGKILL in its GPU step holds the only gpu slot; the next `batch-assets run` fails the
    dead run, frees the slot and runs, with its quiet output, the day's two-channel call read by channel (the
    default); then a units rerun with a hint and `--channels mix`. Over 60 s here: three `batch-assets run`
    processes, the kill and the CLI's own output being what is tested."""
    call, _ = call_of(("meetings/planning.mp3",))
    (tmp_path / "source" / PARTITION / "calls").mkdir(parents=True)
    sf.write(tmp_path / "source" / PARTITION / "calls" / "planning_call.wav", call, 16_000)
    env = _cli_env(tmp_path, tmp_path / "source")
    first = _start_cli(env, tmp_path / "first.log")
    _wait_for(tmp_path / "first.log", GPU_STEP_STARTED, first)
    os.killpg(first.pid, signal.SIGKILL)  # the run worker and its step process, as a lost node would
    first.wait()
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        [dead] = instance.get_runs()
        assert dead.status == dg.DagsterRunStatus.STARTED
        assert instance.event_log_storage.get_concurrency_info("gpu").claimed_slots  # it holds the only slot
    # the same settings as flags this time (each sets the variable it names)
    flags = {"--source": env.pop("BATCH_ASSETS_SOURCE_URL"), "--storage": env.pop("BATCH_ASSETS_STORAGE_URL"),
             "--device": env.pop("BATCH_ASSETS_DEVICE")}
    second = subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", "--partition", PARTITION,
                             *[part for pair in flags.items() for part in pair]], env=env,
                            capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert_arrays_load(StorageResource(storage_url=flags["--storage"]))
    [unit] = StorageResource(storage_url=flags["--storage"]).read_parquet("transcripts", PARTITION, "units").to_dicts()
    assert (unit["channel_reading"], unit["channel_source"], unit["num_speakers"]) == ("by_channel", "auto", 2)
    assert f"run {dead.run_id} (transcribe_partition) was STARTED but its processes" in second.stderr
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert not instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
        # `batch-assets run` is the job on the instance, its checks included (as the schedule and the UI run it)
        [new] = [r for r in instance.get_runs() if r.run_id != dead.run_id]
        assert new.job_name == "transcribe_partition" and new.status == dg.DagsterRunStatus.SUCCESS
        checks = instance.get_records_for_run(new.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
        names = {r.event_log_entry.dagster_event.event_specific_data.check_name for r in checks}
        assert names == {"units_accounted_for", "partition_has_audio", "no_words_on_silent_units",
                         "exports_cover_units", "exports_match_tables"}
    # the quiet output: a line per step, every check with its result, the run id and what to do next;
    # the event log in a file
    out = second.stdout
    assert "DEBUG" not in out and "Warning" not in out, out
    for name in names:
        assert re.search(rf"^  pass  \w+: {name} \({PARTITION}\)$", out, re.M), (name, out)
    for step in ("fetched_audio", "prepared_flights", "gpu_section.assemble_gpu_tables", "transcript_exports"):
        assert re.search(rf"^  ok     {re.escape(step)} +\d+\.\d s", out, re.M), (step, out)
    assert f"run {new.run_id} succeeded" in out and "batch-assets export --partition" in out
    log = re.search(r"event log and library warnings: (\S+\.log)", out).group(1)
    assert "STEP_SUCCESS" in pathlib.Path(log).read_text()
    # a unit rerun from the command line, with a speaker-count hint: only the GPU assets and the exports run
    again = subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", "--partition", PARTITION, "--units",
                            "calls/planning_call.wav", "--num-speakers", "1", "--channels", "mix",
                            *[part for pair in flags.items() for part in pair]],
                           env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:]
    assert "ok     fetched_audio" not in again.stdout and "ok     transcript_exports" in again.stdout
    storage = StorageResource(source_url=flags["--source"], storage_url=flags["--storage"])
    [unit] = storage.read_parquet("transcripts", PARTITION, "units").iter_rows(named=True)
    assert (unit["num_speakers"], unit["hint_num_speakers"], unit["hint_source"]) == (1, 1, "run config")
    assert (unit["channel_reading"], unit["channel_source"]) == ("mixed", "run_config")


def test_run_flags_name_their_variables_and_a_backwards_range_is_refused(tmp_path):
    env = _cli_env(tmp_path, tmp_path / "source")
    shown = subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", "--help"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert shown.returncode == 0
    for flag, variable in (("--source", "BATCH_ASSETS_SOURCE_URL"), ("--storage", "BATCH_ASSETS_STORAGE_URL"),
                           ("--asr-model", "BATCH_ASSETS_ASR_MODEL"), ("--device", "BATCH_ASSETS_DEVICE"),
                           ("--diarization-pipeline", "BATCH_ASSETS_DIARIZATION_PIPELINE")):
        assert (flag in shown.stdout
                and variable in " ".join(shown.stdout.split()).replace("- ", "-")), (flag, shown.stdout)
    backwards = subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", "--partition", "2026-01-15",
                                "--through", "2026-01-14"], env=env, capture_output=True, text=True, timeout=120)
    assert backwards.returncode == 2
    assert "--through 2026-01-14 is before --partition 2026-01-15" in backwards.stderr
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert not instance.get_runs()  # nothing launched


@pytest.mark.e2e
def _cpu_share(pid: int, seconds: float) -> float:
    """The share of one core the process `pid` itself (not its children) used over `seconds`, from /proc."""
    def ticks() -> int:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime

    before = ticks()
    time.sleep(seconds)
    return (ticks() - before) / os.sysconf("SC_CLK_TCK") / seconds


def test_the_dagster_adapter_knows_the_pool_claim_it_wraps():
    """Fails on a Dagster upgrade that changes `InstanceConcurrencyContext.claim`: look whether its executor still
    spins while a step waits for a pool slot (fixed: drop `orchestration/dagster_adapter.py`), then update it."""
    from batch_assets.orchestration import dagster_adapter

    assert dg.__version__ == dagster_adapter.DAGSTER_VERSION, "Dagster upgraded: check orchestration/dagster_adapter.py"
    context, original = dagster_adapter.dagster_claim()
    dagster_adapter.install_pool_wait_sleep()
    assert context.claim is dagster_adapter._claim_after_a_nap and dagster_adapter._ORIGINAL == [original]


# what opening an instance imports that takes time (SQLAlchemy, Alembic, Dagster's SQL storages)
HEAVY_STORAGE = ("sqlalchemy", "alembic", "dagster_postgres", "dagster._core.storage.runs",
                 "dagster._core.storage.event_log", "dagster._core.storage.schedules", "dagster._core.storage.sql")


def test_the_executor_knows_the_multiprocessing_state_it_reaches_into():
    """Issue 65: `orchestration/executor.py` stops the forkserver a run started and tells multiprocessing's resource
    tracker from a run's processes through multiprocessing's private state; a Python that moves it fails here, so
    that someone looks. A forkserver started here is stopped, and one running before a run is left alone."""
    import multiprocessing
    from multiprocessing import forkserver, resource_tracker

    from batch_assets.orchestration.executor import host_services, run_forkserver_pid, stop_run_forkserver

    assert callable(forkserver._forkserver._stop) and hasattr(resource_tracker._resource_tracker, "_pid")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([])
    child = context.Process(target=int)
    child.start()
    child.join()
    pid = run_forkserver_pid()
    assert pid and host_services()
    assert stop_run_forkserver({pid}) is None and run_forkserver_pid() == pid  # a host's own: left alone
    assert stop_run_forkserver(set()) == pid and run_forkserver_pid() is None


@pytest.mark.slow  # a fresh interpreter importing the code location and Dagster's storages
def test_the_forkserver_preload_holds_what_opening_the_instance_imports(tmp_path):
    """A step process forked from the shipped executor's forkserver opens the instance without importing its
    storage again (`FORKSERVER_PRELOAD`; multiprocessing skips a preload module that does not import, so a Dagster
    upgrade that moved them would only cost each step that time again, unseen but here)."""
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(SHIPPED_DAGSTER_YAML, home / "dagster.yaml")
    probe = (f"STORAGE = {HEAVY_STORAGE!r}\nimport importlib, json, sys\n"
             "from batch_assets.orchestration.executor import FORKSERVER_PRELOAD\n"
             "for name in FORKSERVER_PRELOAD:\n    importlib.import_module(name)\n"
             "before = set(sys.modules)\n"
             "import dagster as dg\n"
             f"dg.DagsterInstance.from_config({str(home)!r}).get_runs(limit=1)\n"
             "print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith(STORAGE))))\n")
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                           env=os.environ | {"DAGSTER_HOME": str(home)})
    assert shown.returncode == 0, shown.stderr[-3000:]
    imported = json.loads(shown.stdout.splitlines()[-1])
    assert imported == [], (f"opening the instance imported {len(imported)} modules ({', '.join(imported[:5])}, …): "
                            "add what imports them to dagster_adapter.INSTANCE_STORAGE_MODULES")


@pytest.mark.e2e  # a `batch-assets run`
def test_sigterm_stops_a_run_waiting_for_the_gpu_pool(tmp_path):
    env = _cli_env(tmp_path, make_source(tmp_path / "source", {PARTITION: ["meetings/planning.mp3"]}))
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:  # a live holder: another machine's run
        instance.event_log_storage.initialize_concurrency_limit_to_default("gpu")
        instance.event_log_storage.claim_concurrency_slot("gpu", "holder-run", "gpu_section")
    proc = _start_cli(env, tmp_path / "waiting.log")
    _wait_for(tmp_path / "waiting.log", "Step blocked by limit for pool gpu", proc)
    busy = _cpu_share(proc.pid, 2.0)  # issue 56: Dagster's executor spun a core while it waited (98 %)
    print(f"the CLI waiting for the gpu pool: {busy:.1%} of a core over 2 s")
    assert busy < 0.2, busy
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    stopped = time.monotonic() - sent
    print(f"SIGTERM while waiting for the pool: exited after {stopped:.1f} s")
    assert stopped < 10 and proc.returncode != 0
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        [run] = instance.get_runs()
        assert run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
    os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None


@pytest.mark.e2e
def test_sigterm_in_the_gpu_step_fails_the_run_and_frees_its_slot(tmp_path):
    """What an evicted pod's processes get: SIGTERM during the GPU step; the run must end failed (issue 65: in a
    pod, `KUBERNETES_SERVICE_HOST` set, so that run retries take it up; outside one a SIGTERM is the operator's
    cancel, as Ctrl-C is), holding nothing."""
    env = _cli_env(tmp_path, make_source(tmp_path / "source", {PARTITION: ["meetings/planning.mp3"]}))
    env["KUBERNETES_SERVICE_HOST"] = "10.96.0.1"  # what every pod's environment holds
    proc = _start_cli(env, tmp_path / "evicted.log")
    _wait_for(tmp_path / "evicted.log", GPU_STEP_STARTED, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    sent = time.monotonic()
    proc.wait(timeout=60)
    print(f"SIGTERM at the GPU step's start: the run exited after {time.monotonic() - sent:.1f} s")
    # the step stops: an interruption a library swallowed (NeMo's import) is raised at its next safe point
    assert not re.search(r"ok\s+gpu_section\.gpu_shard", (tmp_path / "evicted.log").read_text())
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.FAILURE
        assert not instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
    deadline = time.monotonic() + 30  # nothing left running (the step process ends its own shutdown)
    while subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).stdout and time.monotonic() < deadline:
        time.sleep(0.5)
    left = subprocess.run(["ps", "-o", "pid,args", "-g", str(proc.pid)], capture_output=True, text=True).stdout
    assert not subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True).stdout, left


def _newest_lease(storage: pathlib.Path, partition: str) -> dict:
    return json.loads(sorted((storage / ".leases" / partition).glob("gen-*.json"))[-1].read_text())


@pytest.mark.e2e
def test_ctrl_c_at_a_random_moment_or_twice_ends_the_command_holding_nothing(tmp_path):
    """Issue 48: SIGINT to the command's process group (Ctrl-C in a terminal) at a random moment of the run ends it
    within 30 s; a second SIGINT ends it within seconds (cli/stopping.py: its processes killed, the run canceled, its
    pool slot and partition lease freed, nothing left running). benchmarks/signals.py runs the loop of tries. (The
    next run after a stop, started at once and reusing the stopped run's commits, is the test below: issue 56 moved
    it there.)"""
    env = _cli_env(tmp_path, make_source(tmp_path / "source", {PARTITION: ["meetings/planning.mp3"]}))
    storage = pathlib.Path(env["BATCH_ASSETS_STORAGE_URL"])
    moment = random.uniform(0.0, 20.0)  # the run's first step to about its assembly, on this machine
    print(f"SIGINT {moment:.1f} s after the first step started")
    proc = _start_cli(env, tmp_path / "random.log")
    _wait_for(tmp_path / "random.log", "STEP_START", proc)
    time.sleep(moment)
    sent = time.monotonic()
    with contextlib.suppress(ProcessLookupError):  # it may have ended just now
        os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=30)
    print(f"ended {time.monotonic() - sent:.1f} s after the signal, exit code {proc.returncode}")
    twice = _start_cli(env, tmp_path / "twice.log")
    _wait_for(tmp_path / "twice.log", GPU_STEP_STARTED, twice)
    # the GPU step frozen (as a step whose interpreter hangs in its finalization): Dagster's own stop cannot end
    started = next(line for line in (tmp_path / "twice.log").read_text().splitlines() if GPU_STEP_STARTED in line)
    gpu_step = int(started.split(" - ")[5])  # Dagster's log line: ... - run id - pid - step - ...
    forked_by = int(pathlib.Path(f"/proc/{gpu_step}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert "forkserver" in pathlib.Path(f"/proc/{forked_by}/cmdline").read_text()  # the shipped executor's default
    os.kill(gpu_step, signal.SIGSTOP)
    os.killpg(twice.pid, signal.SIGINT)
    _wait_for(tmp_path / "twice.log", "SIGINT: stopping the run", twice, timeout=10)
    os.killpg(twice.pid, signal.SIGINT)
    sent = time.monotonic()
    twice.wait(timeout=30)
    stopped = time.monotonic() - sent
    print(f"a second SIGINT: ended after {stopped:.1f} s")
    text = (tmp_path / "twice.log").read_text()
    assert stopped < 10 and twice.returncode == 130 and "a second signal: stopping the run now" in text, text[-3000:]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        runs = instance.get_runs()
        assert runs[0].status == dg.DagsterRunStatus.CANCELED
        # canceled, as the operator asked (issue 56: not failed), or, signalled after its end, succeeded
        assert runs[1].status in (dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.SUCCESS), runs[1].status
        assert not instance.event_log_storage.get_concurrency_info("gpu").claimed_slots
    lease = _newest_lease(storage, PARTITION)
    assert lease["holder"] != runs[0].run_id or lease["released"], lease
    left = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-g", str(twice.pid)], capture_output=True, text=True)
    assert all(line.split()[1].startswith("Z") for line in left.stdout.splitlines()), left.stdout  # dead, or gone
    # nothing held, so the next run starts at once: no pool slot claimed and the lease freed (above); a next run
    # of a stopped day, with its progress and its reuse of the stopped run's commits: the test below


@pytest.mark.e2e
def test_a_plain_run_after_a_ctrl_c_reuses_the_stopped_runs_commits_in_the_same_process(tmp_path):
    """Issue 56: Ctrl-C once a first flight is committed (9 units: two flights, the first of 8): Dagster stops the
    run its own way, the command reports it canceled (and its interrupted step stopped, not "retry"), the run is
    CANCELED. A plain run then reuses the stopped run's commits (same plan, same identity) instead of computing
    them again, says so, and its metadata counts them by the run they came from.

    Issue 65: a cancel, not a failure to retry (no run-failure event, no retry tag, the event log naming the
    signal); and both runs are `commands.run()` in one Python process (a notebook's): the stop guard disarms once the
    stopped run ended (the process idles past the guard's grace, alive), the run's forkserver is stopped with it,
    and the second run forks its steps from a forkserver of its own. Before: the process exited 130 in its idle
    wait ("RESULT first 130 forkserver <pid>", then nothing).

    Over 60 s here: two runs, a real SIGINT and the grace's idle wait.
    """
    key = "calls/followup.flac"  # 12.3 s
    source = tmp_path / "source" / PARTITION
    for i in range(9):
        (source / f"call-{i}").mkdir(parents=True)
        shutil.copy(SAMPLE_SOURCE / "2026-01-16" / key, source / f"call-{i}" / "followup.flac")
    env = _cli_env(tmp_path, tmp_path / "source")
    work = pathlib.Path(env["BATCH_ASSETS_STORAGE_URL"]) / "gpu_work" / PARTITION
    script = textwrap.dedent(f"""
        import os, pathlib, signal, threading, time
        from batch_assets.cli import commands
        from batch_assets.cli.stopping import GRACE_S
        from batch_assets.orchestration.executor import run_forkserver_pid

        work = pathlib.Path({str(work)!r})

        sent = []

        def interrupt():
            while not list(work.glob("*/*.commit.json")):
                time.sleep(0.1)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        first = commands.run({PARTITION!r})
        print("RESULT first", first, "forkserver", run_forkserver_pid(), flush=True)
        print("RESULT committed", len(list(work.glob("*/*.commit.json"))), flush=True)
        time.sleep(max(0.0, sent[0] + GRACE_S + 2 - time.monotonic()))  # an armed guard ends it within its grace
        second = commands.run({PARTITION!r})
        print("RESULT second", second, "forkserver", run_forkserver_pid(), flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0 and "RESULT second 0 forkserver None" in out, (proc.returncode, out[-4000:],
                                                                              proc.stderr[-3000:])
    assert "RESULT first 130 forkserver None" in out, out[-4000:]  # stopped, and its forkserver with it
    committed = int(re.search(r"RESULT committed (\d+)", out).group(1))
    stopped_text = out[: out.index("RESULT first")]
    assert re.search(r"run \S+ canceled \(SIGINT\)", stopped_text), stopped_text[-3000:]
    assert not re.search(r"^\s*retry\s+gpu_section", stopped_text, re.M), stopped_text[-3000:]
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        after, stopped = instance.get_runs()  # newest first
        assert stopped.status == dg.DagsterRunStatus.CANCELED and after.status == dg.DagsterRunStatus.SUCCESS
        # issue 65: a cancel, not a failure to retry: no run-failure event, no retry or failure tags; who stopped it
        events = instance.all_logs(stopped.run_id)
        kinds = {e.dagster_event.event_type_value for e in events if e.dagster_event}
        assert "PIPELINE_FAILURE" not in kinds and "RUN_FAILURE" not in kinds, kinds
        assert not {"dagster/will_retry", "dagster/failure_reason"} & set(stopped.tags), stopped.tags
        said = [e.dagster_event.message or "" for e in events if e.dagster_event]
        assert "PIPELINE_CANCELING" in kinds and any("stopped by SIGINT from the operator" in m for m in said), said
    second_text = out[out.index("RESULT committed"):]
    # The commit of flight 1 is written beside the device's work on flight 2 (host work overlaps it), so the signal
    # may find flight 2 past its last safe point: it then ends and commits, and the next run has nothing to compute
    if committed < 2:
        assert "2 of 2 flights done" in second_text, second_text
    else:
        assert "flights done" not in second_text, second_text
    # builtin models on audio that is not the bundled sample: said once, with the production models' flags (issue 64)
    assert second_text.count("trained on synthetic (espeak-ng) speech only") == 1, second_text
    log = pathlib.Path(re.search(r"event log and library warnings: (\S+)", second_text).group(1)).read_text()
    assert f"flight(s) committed by run {stopped.run_id}" in log
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey("transcripts"))
    meta = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert meta["flights_reused_from_other_runs"] == {stopped.run_id: committed}, meta
    assert meta["resumed_flights"] == committed and meta["flights_redone"] == 0
    print(f"Ctrl-C after {committed} of 2 flights committed: the next run, in the same process, reused {committed}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_process_waiting_for_the_section_lock(tmp_path, sig):
    code = ("from batch_assets.gpu.device.lock import device_section\nprint('waiting', flush=True)\n"
            f"with device_section({str(tmp_path)!r}, 'cpu'):\n    print('entered', flush=True)\n")
    def default_signals() -> None:
        # What a run worker starts with. The test runner's own state must not leak in: once, in a full suite run,
        # this child ignored both signals (inherited from pytest, whatever earlier test or library set it there).
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_DFL)

    status = pathlib.Path("/proc/thread-self/status").read_text().splitlines()
    parent = {k: v.strip() for k, v in (line.split(":", 1) for line in status) if k in ("SigIgn", "SigBlk")}
    with filelock.FileLock(str(lock_path(str(tmp_path), "cpu"))):
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                preexec_fn=default_signals)  # noqa: PLW1509 (signal state only, no locks taken)
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready and proc.stdout.readline() == "waiting\n"  # imported: it goes for the lock next
        time.sleep(0.3)  # well inside filelock's polling (every 0.05 s)
        assert proc.poll() is None
        sent = time.monotonic()
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child = pathlib.Path(f"/proc/{proc.pid}/status").read_text()
            proc.kill()
            raise AssertionError(f"the waiting process ignored {sig!r}; pytest's {parent}; "
                                 f"the child's:\n{child}") from None
    assert time.monotonic() - sent < 10 and proc.returncode != 0 and "entered" not in proc.stdout.read()


def test_a_partition_key_that_is_not_a_day_names_the_format_and_the_first_partition():
    probe = subprocess.run([sys.executable, "-m", "batch_assets.cli", "run", "--partition", "2026-13-01"],
                           capture_output=True, text=True, timeout=120)
    assert probe.returncode == 2
    assert "partition '2026-13-01' is not a day" in probe.stderr and "YYYY-MM-DD, from 2026-01-01" in probe.stderr
