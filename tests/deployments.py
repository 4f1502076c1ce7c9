"""The two configurations the end-to-end suite runs: the embedded default and the one the Helm chart deploys.

- `local`: source and storage in local folders, the SQLite instance of `dagster_home/dagster.yaml`.
- `s3-postgres`: source and storage on a real S3 API (moto on loopback; the audio bucket keeps versions), the
  instance on a real PostgreSQL server
  on loopback, configured as the Helm chart renders `k8s/values.yaml` (dagster-postgres storage with the values'
  `postgresqlScheme`, the password from `DAGSTER_PG_PASSWORD`, run retries, run monitoring, the `gpu` pool, no
  compute logs); every process of a run gets its own empty temp dir, HOME and lock dir (tests/isolated), so the
  steps share nothing but the storage, as pods do.

Runs are real processes (`tests/driver.py`: `execute_job` on the instance, one process per step), so they can be
killed for real. On `local` the step processes are forked from a forkserver, as the shipped executor forks them
(`orchestration/executor.py`), whose preload here adds the model libraries: the sample's runs have 3 or 4 GPU steps,
each of which would import NeMo and pyannote again (~14 s a GPU step here). `s3-postgres` spawns a fresh interpreter
per step, as a pod has (`k8s_job_executor` there).

A test whose boundary is the run's process, not its steps' (a run killed whole, a failed run and its
re-execution, a late run), asks for `in_process=True`: the run's steps in the run's own process (Dagster's
in-process executor), the same step code against the same instance and storage. The sample partition in 3
shards takes 12 s so, against 29 s with the steps forked and 46 s spawned, on an idle machine here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time
from collections.abc import Callable

import dagster as dg
import yaml

from batch_assets.orchestration.executor import FORKSERVER_PRELOAD
from batch_assets.storage.resource import REPO_ROOT, StorageResource

from . import driver
from .conftest import TORCH_THREADS
from .published_arrays import assert_arrays_load

ISOLATED = pathlib.Path(__file__).resolve().parent / "isolated"
# what a local run's step processes are forked from: what the shipped executor preloads and everything a GPU step
# imports
FORKSERVER = {"config": {"multiprocess": {"start_method": {"forkserver": {"preload_modules": [
    *FORKSERVER_PRELOAD, "batch_assets.gpu.steps.shard_work", "batch_assets.gpu.section.runner",
    "batch_assets.gpu.section.loaded", "batch_assets.models.loaders", "nemo.collections.asr", "pyannote.audio"]}}}}}
# a fresh interpreter per step, as a step pod is (s3-postgres)
SPAWNED = {"config": {"multiprocess": {"start_method": {"spawn": {}}}}}
VALUES = yaml.safe_load((REPO_ROOT / "k8s" / "values.yaml").read_text())
# the steps in the run's own process, for a test whose boundary is the run's process (Deployment.start)
IN_PROCESS = {"config": {"in_process": {}}}
RETRY_AT_ONCE = {"BATCH_ASSETS_GPU_RETRY_DELAY_SECONDS": "1"}  # a killed step's retry starts without the 30 s wait
# the chart's runMonitoring values -> dagster.yaml run_monitoring fields (helm/dagster: configmap-instance.yaml)
MONITORING_FIELDS = {"enabled": "enabled", "startTimeoutSeconds": "start_timeout_seconds",
                     "pollIntervalSeconds": "poll_interval_seconds", "maxResumeRunAttempts": "max_resume_run_attempts",
                     "freeSlotsAfterRunEndSeconds": "free_slots_after_run_end_seconds"}


def helm_instance_yaml(host: str, port: int) -> dict:
    """dagster.yaml as the official chart renders it from k8s/values.yaml (its `dagsterYaml.postgresql.config`
    helper and its run retries, run monitoring, concurrency and compute-log sections), pointed at `host:port`.
    tests/test_k8s.py checks it against Dagster's own instance schema and run-retry rules."""
    pg = VALUES["postgresql"]
    postgres_db = {"username": pg["postgresqlUsername"], "password": {"env": "DAGSTER_PG_PASSWORD"}, "hostname": host,
                   "db_name": pg["postgresqlDatabase"], "port": port, "params": pg.get("postgresqlParams") or {}}
    if pg.get("postgresqlScheme"):
        postgres_db["scheme"] = pg["postgresqlScheme"]
    daemon = VALUES["dagsterDaemon"]
    retries, monitoring = daemon["runRetries"], daemon["runMonitoring"]
    pools = VALUES["concurrency"]["pools"]
    return {
        "storage": {"postgres": {"postgres_db": postgres_db}},
        "run_retries": {"enabled": retries["enabled"], "max_retries": retries["maxRetries"],
                        "retry_on_asset_or_op_failure": retries["retryOnAssetOrOpFailure"]},
        "run_monitoring": {field: monitoring[key] for key, field in MONITORING_FIELDS.items() if key in monitoring},
        "concurrency": {"pools": {"default_limit": pools["defaultLimit"], "granularity": pools["granularity"]}},
        "compute_logs": {"module": "dagster.core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"},
        "telemetry": {"enabled": False},
    }


@dataclasses.dataclass
class Deployment:
    name: str
    home: pathlib.Path  # DAGSTER_HOME: dagster.yaml only (plus SQLite files for `local`)
    env: dict[str, str]  # what every process of a run sees (the README's variables for this configuration)
    storage: StorageResource  # the same storage, for the test to read outputs and plant faults
    work: pathlib.Path
    execution: dict | None = None  # the runs' executor config (`execution:` in run config), when not the default

    def instance(self) -> dg.DagsterInstance:
        old = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # DAGSTER_PG_PASSWORD is read when the instance is built
        try:
            return dg.DagsterInstance.from_config(str(self.home))
        finally:
            for key, value in old.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def start(self, env: dict[str, str] | None = None, in_process: bool = False,
              **args) -> tuple[driver.Launched, pathlib.Path]:
        """Launch one run as a process (`tests/driver.py`), with `env` over the deployment's variables (a redeploy);
        returns it and its log. `in_process`: its steps in its own process, not one process each. A re-execution
        takes its parent's run config, executor config included, unless `in_process` says otherwise."""
        execution = IN_PROCESS if in_process else None if args.get("reexecute_from") else self.execution
        if execution is not None:
            args["execution"] = execution
        log = self.work / f"run-{time.monotonic_ns()}.log"
        return driver.launch(args, dict(os.environ | self.env | (env or {})), log, REPO_ROOT), log

    def run(self, timeout_s: float = 900, **args) -> dict:
        """Run to the end; returns the driver's answer (run_id, success, wall_s). After a successful run, every
        `.npy` in the storage loads."""
        answer = self.finish(*self.start(**args), timeout_s)
        if answer.get("success"):
            assert_arrays_load(self.storage)
        return answer

    @staticmethod
    def finish(process: driver.Launched, log: pathlib.Path, timeout_s: float = 900) -> dict:
        """Wait for a run `start` launched; returns the driver's answer (run_id, success, wall_s) and its log."""
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise AssertionError(f"run did not finish within {timeout_s:.0f} s: {log.read_text()[-3000:]}") from None
        lines = [line for line in log.read_text().splitlines() if line.startswith("DRIVER ")]
        assert lines, log.read_text()[-5000:]
        answer = json.loads(lines[-1][len("DRIVER "):])
        answer["log"] = log
        return answer

    def kill_step_when(self, condition: Callable[[], bool], step: str, snapshot: Callable[[], object],
                       timeout_s: float = 900, **args) -> tuple[dict, str, object]:
        """Launch a run and, once `condition()` holds, kill -9 the process of one of its running steps whose key
        holds `step` (a step pod lost with its node: the run's own process lives on); returns the run's answer once
        it ends, the key of the step killed and what `snapshot()` gave right after the kill."""
        process, log = self.start(**args)
        deadline = time.monotonic() + timeout_s
        while True:
            assert process.poll() is None, log.read_text()[-5000:]
            assert time.monotonic() < deadline, f"condition not met within {timeout_s:.0f} s"
            if condition():
                with self.instance() as instance:
                    [run] = instance.get_runs(limit=1)
                    events = instance.all_logs(run.run_id, of_type={dg.DagsterEventType.STEP_START,
                                                                    dg.DagsterEventType.STEP_SUCCESS})
                ended = {e.step_key for e in events if e.dagster_event.event_type == dg.DagsterEventType.STEP_SUCCESS}
                for event in events:
                    if step in (event.step_key or "") and event.step_key not in ended:
                        try:
                            os.kill(event.dagster_event.pid, signal.SIGKILL)
                        except ProcessLookupError:  # it ended just now
                            continue
                        taken = snapshot()
                        return self.finish(process, log, timeout_s), event.step_key, taken
            time.sleep(0.05)

    def kill_when(self, condition: Callable[[], bool], timeout_s: float = 600, **args) -> str:
        """Launch a run, kill -9 its whole process group once `condition()` holds (a preempted node), fail it as run
        monitoring would and free its pool slots; returns its run id."""
        process, log = self.start(**args)
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert process.poll() is None, log.read_text()[-5000:]
            assert time.monotonic() < deadline, f"condition not met within {timeout_s:.0f} s"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        with self.instance() as instance:
            [dead] = [r for r in instance.get_runs(limit=1)]
            assert dead.status == dg.DagsterRunStatus.STARTED, dead.status
            instance.report_run_failed(dead)  # what run monitoring (or batch_assets.orchestration.dead_runs) does
            instance.event_log_storage.free_concurrency_slots_for_run(dead.run_id)
            return dead.run_id

    def processes(self) -> list[pathlib.Path]:
        """The per-process folders tests/isolated made (s3-postgres only)."""
        return sorted((self.work / "processes").glob("process-*"))


def local(work: pathlib.Path, source: pathlib.Path) -> Deployment:
    home = work / "home"
    home.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    storage = StorageResource(source_url=str(source), storage_url=str(work / "storage"))
    env = {"DAGSTER_HOME": str(home), "BATCH_ASSETS_SOURCE_URL": storage.source_url,
           "BATCH_ASSETS_STORAGE_URL": storage.storage_url, "BATCH_ASSETS_LOCK_DIR": str(work / "locks"),
           "BATCH_ASSETS_DEVICE": "cpu", "BATCH_ASSETS_TORCH_THREADS": str(TORCH_THREADS), "PYTHONWARNINGS": "ignore",
           **RETRY_AT_ONCE}
    return Deployment("local", home, env, storage, work, execution=FORKSERVER)


def s3_postgres(work: pathlib.Path, s3, postgres, bucket_prefix: str, sample: pathlib.Path,
                partitions: list[str]) -> Deployment:
    """Buckets `{prefix}-audio` (the sample copied under each of `partitions`) and `{prefix}-out`, a database of its
    own, and the instance as the chart renders it. S3 goes through the fault proxy (it forwards everything unless
    told to fault), so a test can make a prefix refuse writes."""
    client = s3.client()
    audio, out = f"{bucket_prefix}-audio", f"{bucket_prefix}-out"
    # versioning on, as AWS recommends and compliance requires: the objects carry VersionIds (issue 64: every unit of
    # such a bucket was changed_since_listed)
    s3.bucket(audio, "Enabled")
    client.create_bucket(Bucket=out)
    for partition in partitions:
        for path in sorted(p for p in sample.rglob("*") if p.is_file()):
            client.upload_file(str(path), audio, f"recordings/{partition}/{path.relative_to(sample).as_posix()}")
    database = postgres.create_database(bucket_prefix.replace("-", "_"))
    home = work / "home"
    home.mkdir(parents=True)
    instance = helm_instance_yaml("127.0.0.1", postgres.port)
    instance["storage"]["postgres"]["postgres_db"]["db_name"] = database
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance))
    (work / "processes").mkdir()
    storage = StorageResource(source_url=f"s3://{audio}/recordings", storage_url=f"s3://{out}/batch_assets",
                              s3_endpoint_url=s3.faulty_endpoint, s3_region="us-east-1",
                              s3_access_key_id="testing", s3_secret_access_key="testing")
    env = {"DAGSTER_HOME": str(home), "DAGSTER_PG_PASSWORD": postgres.password,
           "BATCH_ASSETS_SOURCE_URL": storage.source_url, "BATCH_ASSETS_STORAGE_URL": storage.storage_url,
           "BATCH_ASSETS_S3_ENDPOINT_URL": s3.faulty_endpoint, "AWS_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "BATCH_ASSETS_DEVICE": "cpu", "BATCH_ASSETS_TORCH_THREADS": str(TORCH_THREADS), "PYTHONWARNINGS": "ignore",
           **RETRY_AT_ONCE, "PYTHONPATH": os.pathsep.join([str(ISOLATED), str(REPO_ROOT)]),
           "BATCH_ASSETS_TEST_PROCESS_ROOT": str(work / "processes")}
    return Deployment("s3-postgres", home, env, storage, work, execution=SPAWNED)
