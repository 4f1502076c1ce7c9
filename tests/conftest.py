"""Shared fixtures: an isolated storage root, model cache and lock folder per test session.

The sample partition is materialized once per session with the real assets, real Dagster instance,
real (tiny) NeMo and pyannote models; tests then read the real parquet outputs.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")
# A CI clone builds the builtin models once per session (seconds); a developer's cache is left alone. Set before
# anything imports batch_assets: the settings are read once per process (`settings.current_settings`).
if "BATCH_ASSETS_MODEL_CACHE" not in os.environ:
    os.environ["BATCH_ASSETS_MODEL_CACHE"] = tempfile.mkdtemp(prefix="batch_assets-model-cache-")
    atexit.register(shutil.rmtree, os.environ["BATCH_ASSETS_MODEL_CACHE"], ignore_errors=True)

import pathlib

import dagster as dg
import pytest

from batch_assets.gate.columns import TABLES  # the three GPU assets' seven tables
from batch_assets.storage.resource import REPO_ROOT, SAMPLE_PARTITION

from .published_arrays import assert_arrays_load

SAMPLE_SOURCE = REPO_ROOT / "sample_data" / "audio"
# torch threads for this test process and the runs it launches: the cores split between pytest-xdist's workers
# (threads beyond a process's share of the cores slow every process on the machine many times over)
TORCH_THREADS = max(1, min(2, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


# The groups that take longest, longest first (`make test` prints the slowest tests): pytest-xdist's workers take
# them first, so no long group starts last while the other worker idles. A group is a test file (its tests share
# the file's fixtures); test_deployed is one group per configuration (each builds its own deployment).
LONGEST_FIRST = ["test_deployed[s3-postgres]", "test_reliability", "test_unwatched", "test_long_units",
                 "test_webserver", "test_switches", "test_deployed[local]", "test_nothing_worse",
                 "test_flight_batching", "test_batch_invariance", "test_dev", "test_gate", "test_embedding_trunk",
                 "test_shards"]


def suite_group(nodeid: str) -> str:
    """The group of a test id (`tests/test_deployed.py::test_x[s3-postgres-...]` is `test_deployed[s3-postgres]`)."""
    group = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    if group == "test_deployed":
        return f"{group}[{'s3-postgres' if '[s3-postgres' in nodeid else 'local'}]"
    return group


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist (`make test` runs three workers, `make test-fast` two): whole groups to a worker, in the
    collection's order (longest first), not xdist's own reordering by the number of tests."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return suite_group(nodeid)

    config.option.loadscopereorder = False
    return ByGroup(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need a CUDA device: skipped, saying so, where there is none. After pytest's own ordering,
    the longest groups go first (a stable sort: the order within a group stays pytest's)."""
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:
        import torch

        if not torch.cuda.is_available():
            for item in gpu:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)"))
    result = yield
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(suite_group(item.nodeid), len(rank)))
    return result


def in_decoder_mode(models, levers):
    """`models` with the decoder in the mode `levers` ask for, as `run_section` sets it before its flights: for a
    test calling `process_flight` directly. The models are this process's shared ones, and another test (or a
    section run with CUDA graphs off) may have left the decoder in another mode; the order of the tests changes
    with pytest-xdist's workers."""
    from batch_assets.gpu.asr.transcribe import apply_decoder_mode

    models.decoder_settings[models.default_asr_name] = apply_decoder_mode(models.asr, levers.asr_cuda_graphs_enabled,
                                                                          None, models.word_confidence)
    return models


@pytest.fixture(scope="session", autouse=True)
def _torch_threads() -> None:
    import torch

    torch.set_num_threads(TORCH_THREADS)


@pytest.fixture(scope="session")
def lock_dir(tmp_path_factory) -> pathlib.Path:
    return tmp_path_factory.mktemp("locks")


def make_resources(storage_root: pathlib.Path, lock_dir: pathlib.Path, source: pathlib.Path = SAMPLE_SOURCE) -> dict:
    from batch_assets.gate.checks import BaselineResource
    from batch_assets.gpu.steps.resources import GpuResource
    from batch_assets.orchestration.io_manager import StorageJsonIOManager
    from batch_assets.storage.resource import StorageResource

    storage = StorageResource(source_url=str(source), storage_url=str(storage_root))
    return {
        "storage": storage,
        "gpu_io": StorageJsonIOManager(storage=storage),
        "gpu": GpuResource(lock_dir=str(lock_dir), device="cpu"),
        "baseline": BaselineResource(storage_url=""),
    }


def materialize_partition(
    resources: dict, partition: str = SAMPLE_PARTITION, run_config: dict | None = None, raise_on_error: bool = True,
    checks: list | None = None,
):
    """All six assets and their checks (plus `checks`, e.g. the baseline gate) for one partition; after a successful
    run, every `.npy` in its storage loads."""
    from batch_assets.definitions import all_assets, exports_checks, transcripts_checks

    result = dg.materialize(
        [*all_assets, *transcripts_checks, *exports_checks, *(checks or [])],
        partition_key=partition,
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
        run_config=run_config,
        raise_on_error=raise_on_error,
    )
    if result.success:
        assert_arrays_load(resources["storage"])
    return result


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory, lock_dir):
    """The sample partition materialized once, all switches at their defaults (on)."""
    root = tmp_path_factory.mktemp("storage")
    resources = make_resources(root, lock_dir)
    result = materialize_partition(resources)
    assert result.success
    return result, resources["storage"]


# every sample unit in a flight of its own (units are 20-50 s): five flights
FLIGHTS_OF_ONE = {"prepared_flights": {"config": {"decode_budget_seconds": 50.0}}}


def tables_of(storage, partition: str = SAMPLE_PARTITION) -> dict:
    """The three GPU assets' seven tables of a partition."""
    return {key: storage.read_parquet(key[0], partition, key[1]) for key in TABLES}


def assert_units_kept(before: dict, after: dict, drop: tuple[str, ...] = ("scores_uri",)) -> None:
    """Every row `before` holds (the seven tables) is in `after` as it was, but for the columns `drop`: a rerun of
    other units, or units added, left them alone."""
    import polars as pl

    kept = before["transcripts", "units"]["unit_id"].to_list()
    for key, frame in before.items():
        frame, now = frame.drop(*drop, strict=False), after[key].filter(pl.col("unit_id").is_in(kept))
        now = now.drop(*drop, strict=False)
        assert frame.equals(now), (key, [c for c in frame.columns if not frame[c].equals(now[c])])


def assert_same_results(a: dict, b: dict) -> None:
    """Equal tables, but for where the VAD score arrays live (a folder per root run, a storage root per test)."""
    for key in TABLES:
        left, right = a[key], b[key]
        drop = [c for c in ("scores_uri", "source_uri") if c in left.columns]
        left, right = left.drop(drop), right.drop(drop)
        assert left.columns == right.columns, (key, left.columns, right.columns)
        differing = [c for c in left.columns if not left[c].equals(right[c])]
        assert not differing, (key, {c: (left[c].to_list()[:5], right[c].to_list()[:5]) for c in differing})


@pytest.fixture(scope="session")
def flights_of_one(tmp_path_factory, lock_dir):
    """The sample partition, uninterrupted, every unit in a flight of its own, in one shard (in process, local)."""
    resources = make_resources(tmp_path_factory.mktemp("flights-of-one"), lock_dir)
    assert materialize_partition(resources, run_config={"ops": FLIGHTS_OF_ONE}).success
    return resources["storage"]


@pytest.fixture(scope="session")
def postgres():
    """One real PostgreSQL server for the session (each deployment makes its own database)."""
    from .servers import PostgresServer

    with PostgresServer() as server:
        yield server
