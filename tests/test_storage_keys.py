"""Every key the project makes is only a key: no glob, no URL chain, on local folders and on a real S3 API.

fsspec's copy and move expand `[`, `]`, `*` and `?` in the source as a glob, its `rm` does the same, and
`url_to_fs` reads `::` as a chain of filesystems. A GPU shard's step key (`gpu_section.gpu_shard[20260201_s000]`)
names the folder of its value, and audio keys may hold any character: each write, read, listing and removal
below goes through `StorageResource` exactly as the assets do.
"""

from __future__ import annotations

import numpy as np
import pytest

from batch_assets.storage.paths import remove_path
from batch_assets.storage.resource import StorageResource

from .s3_server import S3Server

NAMES = ["gpu_section.gpu_shard[20260201_s000]/result.json", "star*/q?.json", "call::1.wav", "hash#1 with space.json",
         "brackets[a-z]/[x].npy"]


@pytest.fixture(scope="module", params=["local", "s3"])
def storage(request, tmp_path_factory):
    if request.param == "local":
        yield StorageResource(storage_url=str(tmp_path_factory.mktemp("keys")))
        return
    with S3Server() as s3:
        s3.client().create_bucket(Bucket="keys")
        yield StorageResource(storage_url="s3://keys/root", s3_endpoint_url=s3.endpoint, s3_region="us-east-1",
                              s3_access_key_id="testing", s3_secret_access_key="testing")


def _all(storage: StorageResource) -> list[str]:
    fs, root = storage.filesystem(storage.storage_url)
    fs.invalidate_cache()
    return sorted(fs.find(root)) if fs.exists(root) else []


@pytest.mark.parametrize("name", NAMES)
def test_write_read_replace_remove_any_key(storage, name):
    url = storage.url("values", name)
    decoy = storage.url("values", name.replace("[", "").replace("]", "").replace("*", "x").replace("?", "x")
                        .replace("::", "-") + ".decoy")
    storage.write_bytes(decoy, b"decoy")  # a sibling a glob or a chain could resolve to
    storage.write_bytes(url, b"first")
    storage.write_bytes(url, b"second")  # replaced whole
    assert storage.read_bytes(url) == b"second" and storage.read_bytes(decoy) == b"decoy"
    fs, path = storage.filesystem(url)
    assert fs.exists(path) and fs.size(path) == len(b"second")
    assert not [p for p in _all(storage) if ".tmp-" in p]  # no temporary object left behind
    remove_path(fs, path)
    assert not fs.exists(path) and storage.read_bytes(decoy) == b"decoy"
    assert storage.remove_tree(storage.url("values")) >= 1 and not _all(storage)


def test_a_chain_like_local_path_opens_that_file_not_its_prefix(tmp_path):
    (tmp_path / "call").write_bytes(b"the sibling")
    (tmp_path / "call::1.wav").write_bytes(b"the unit")
    fs, path = StorageResource(storage_url=str(tmp_path)).filesystem(str(tmp_path / "call::1.wav"))
    with fs.open(path, "rb") as handle:
        assert handle.read() == b"the unit"


def test_stale_outputs_under_glob_characters_are_removed_and_fresh_ones_kept(storage):
    with storage.replace_partition("asset[x]", "2026-02-01") as out:
        out.write_array(np.zeros(3), "a[1]")
        out.write_array(np.zeros(3), "b*")
    with storage.replace_partition("asset[x]", "2026-02-01") as out:
        out.write_array(np.ones(3), "a[1]")
    left = [p.rsplit("/", 1)[-1] for p in _all(storage)]
    assert left == ["a[1].npy"], left
    storage.remove_tree(storage.url("asset[x]"))
    assert not _all(storage)


@pytest.mark.parametrize("name", NAMES)
def test_a_file_written_in_pieces_appears_whole_or_not_at_all(storage, name):
    """`write_chunks` (a long unit's stitched scores): the pieces make the file; a failure while they are made
    leaves the file as it was, and no temporary file behind."""
    url = storage.url(f"chunks/{name}")
    storage.write_chunks(url, (bytes([i]) * 1000 for i in range(5)))
    assert storage.read_bytes(url) == b"".join(bytes([i]) * 1000 for i in range(5))
    before = _all(storage)

    def failing():
        yield b"new"
        raise OSError("the source of the pieces failed")

    with pytest.raises(OSError, match="source of the pieces"):
        storage.write_chunks(url, failing())
    assert storage.read_bytes(url) == b"".join(bytes([i]) * 1000 for i in range(5)) and _all(storage) == before


def test_a_flight_is_read_unit_by_unit_concurrently_and_is_the_array_np_load_gives(storage):
    """Lever 1 reads a flight's units as ranged reads of their own, `workers` at a time (issue 46: storage off the
    GPU's path); the array is the file's, on a key a glob would misread too. With a simulated latency per read,
    eight units through eight workers wait about one latency, one after another eight."""
    import time

    rng = np.random.default_rng(3)
    sizes = [16000 * int(s) for s in rng.integers(1, 5, 8)]
    audio = rng.standard_normal(sum(sizes)).astype(np.float32)
    url = storage.write_array(audio, "prepared_flights", "2026-01-15", "audio/v[1]/flight-0000")
    offsets = np.cumsum([0, *sizes[:-1]])
    spans = [(int(o), n) for o, n in zip(offsets, sizes, strict=True)]
    slow = storage.model_copy(update={"simulated_latency_per_unit_s": 0.25})
    walls = {}
    for workers in (8, 1):
        started = time.perf_counter()
        read = slow.read_flight(url, spans, workers)
        walls[workers] = time.perf_counter() - started
        assert read.dtype == np.float32 and np.array_equal(read, storage.read_array(url))
    assert walls[8] < 1.0 <= 2.0 <= walls[1], walls
    # spans that do not cover the file (a plan that is not this flight's): read whole, the same array
    assert np.array_equal(storage.read_flight(url, spans[:3], 4), audio)
