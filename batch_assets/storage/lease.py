"""One writer per partition: a lease in storage, with an expiry, renewed while its holder works.

Why: two runs writing one partition at once (the 06:00 schedule and an overlapping backfill) delete each
other's files: one run's ingest removed the other's flight arrays under its GPU step. Every asset step
of this project takes the partition's lease before it writes or deletes anything of that partition.

How (any fsspec storage, S3 included): the lease of a partition is a sequence of generation records,
`{storage}/.leases/{partition}/gen-000001.json`, `gen-000002.json`, …; the newest is the lease. A record
names its holder (a run id), when it expires and whether it was released. A new generation is created
with an exclusive create (`O_EXCL` locally, `If-None-Match: *` on S3), so when several writers try to
take a free lease, exactly one wins. The holder rewrites only its own record (renewing its expiry every
`ttl/3` from a background thread while it works); a holder of the same run id takes its lease again at
once (the steps of one run, retries). A lease is free when released, when its holder run is known to be
finished (`holder_alive` returns False: the run failed, was canceled or succeeded, e.g. after the
dead-run check failed a killed run), or, where liveness is unknown, when it expired; a live run keeps it
while it waits between steps. Otherwise a writer waits, logging who holds it, up to `wait_s`, then
fails naming the holder.

Hardened edges:
- a record is written durably (the file, then its folder, fsynced locally) and read back after its
  creation: a writer whose record is not the one that landed (a store that ignores `If-None-Match`) lost;
- a record is read in one whole GET, so a renewal landing while another writer reads it is never a
  failure of that reader (s3fs's `open` sends a HEAD, then a ranged GET that fails once the object changed);
- a background renewal that fails is retried at the next tick and logged when the block ends;
- a record that cannot be read (empty or cut short: what a crash can leave) counts as held while its
  file is younger than the ttl, and as expired (logged) once it is older: it never blocks a partition
  for ever;
- fencing: `check()` raises `LeaseLost` unless the newest record is still this holder's generation; every
  table write, array write, stale-file removal and flight commit calls it first, and renewal stops once
  the lease was taken over, so a holder that was declared dead (paused, cut off) writes nothing more.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import re
import threading
import time
from collections.abc import Callable, Iterator

from batch_assets.storage.paths import fsync_folder, is_local, protocol, remove_path

LEASE_FOLDER = ".leases"
_GENERATION = re.compile(r"gen-\d{6}\.json")  # not the temporary names a renewal writes beside it


class LeaseLost(Exception):
    """This holder's generation is no longer the partition's lease: it must not write."""

    def __init__(self, partition: str, holder: str, why: str):
        super().__init__(f"partition {partition}: run {holder} no longer holds the partition's lease ({why}); it "
                         "writes nothing more. Either another run took the partition over (this one was presumed "
                         "dead, or paused past its lease's ttl) or a failed step of this run gave the lease up: rerun "
                         "the partition once no other run is writing it")


class LeaseHeld(Exception):
    """Another live writer holds the partition."""

    def __init__(self, partition: str, holder: str, waited_s: float):
        self.partition, self.holder = partition, holder
        super().__init__(f"partition {partition} is being written by run {holder} (waited {waited_s:.0f} s): wait "
                         "for that run to finish, or cancel it, then rerun; two runs must not write one partition "
                         "at once")


_LOST_RACE = {"PreconditionFailed", "ConditionalRequestConflict"}


def _exclusive_create(fs, path: str, data: bytes) -> bool:
    """Create `path` holding `data` only if it does not exist; False if it does (or another writer got there first)."""
    if protocol(fs) in ("s3", "s3a"):
        bucket, key = path.split("/", 1)
        try:
            fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        except FileExistsError:  # s3fs's translation of 412 PreconditionFailed
            return False
        except OSError as error:
            code = getattr(error.__cause__, "response", {}).get("Error", {}).get("Code")
            if code in _LOST_RACE:  # 409: a conditional write to the same key in flight
                return False
            raise
        fs.invalidate_cache(posixpath.dirname(path))
        return True
    if not is_local(fs):
        raise NotImplementedError("partition leases need an exclusive create: local folders and S3 only, not "
                                  f"{protocol(fs)}://")
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "wb") as handle:  # whole and on disk before it is visible: a crash leaves no half record
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)  # atomic, and fails if the record exists
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    fsync_folder(posixpath.dirname(path))
    return True


class PartitionLease:
    def __init__(self, storage, partition: str, holder: str, ttl_s: float = 300.0,
                 holder_alive: Callable[[str], bool | None] = lambda _: None):
        self.storage, self.partition, self.holder, self.ttl_s = storage, partition, holder, ttl_s
        self.holder_alive = holder_alive  # True/False when known (the instance's run status), None when not
        self.url = posixpath.join(storage.storage_url.rstrip("/"), LEASE_FOLDER, partition)
        self.fs, self.root = storage.filesystem(self.url)
        self.generation: int | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self.missed_renewals: list[str] = []  # the background renewals that failed (logged when the block ends)

    @staticmethod
    def _name(generation: int) -> str:
        return f"gen-{generation:06d}.json"

    def _path(self, generation: int) -> str:
        """The record's path on `self.fs` (exclusive create, removal)."""
        return posixpath.join(self.root, self._name(generation))

    def _current(self) -> tuple[int, dict | None]:
        self.fs.invalidate_cache(self.root)
        try:
            names = sorted(p for p in self.fs.ls(self.root, detail=False)
                           if _GENERATION.fullmatch(posixpath.basename(p)))
        except FileNotFoundError:
            return 0, None
        if not names:
            return 0, None
        generation = int(posixpath.basename(names[-1])[4:10])
        try:
            record = json.loads(self.storage.read_bytes(self._storage_url(generation)))  # one GET (read_bytes)
            if not isinstance(record, dict) or not {"holder", "expires_unix", "released"} <= record.keys():
                raise ValueError("not a lease record")
            return generation, record
        except FileNotFoundError:  # replaced this instant: treat as held
            return generation, {"holder": "?", "expires_unix": time.time() + self.ttl_s, "released": False}
        except ValueError as error:  # empty or cut short (a crash while it was written) or garbled
            try:
                age = self._age_s(names[-1])
            except FileNotFoundError:  # replaced this instant: treat as held
                age = 0.0
            return generation, {"holder": "?", "released": False, "expires_unix": time.time() + self.ttl_s - age,
                                "unreadable": f"{posixpath.basename(names[-1])} is unreadable ({str(error)[:80]}), "
                                f"{age:.0f} s old"}

    def _age_s(self, path: str) -> float:
        """Seconds since the file was last written (its storage's modification time)."""
        info = self.fs.info(path)
        modified = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
        if hasattr(modified, "timestamp"):
            modified = modified.timestamp()
        return max(0.0, time.time() - float(modified)) if modified is not None else 0.0

    def _record(self, released: bool = False) -> bytes:
        return json.dumps({"holder": self.holder, "expires_unix": time.time() + self.ttl_s, "released": released,
                           "partition": self.partition}).encode()

    def _free(self, record: dict | None) -> bool:
        """Free: none yet, released, its run known to be finished, (liveness unknown) expired, or unreadable and older
        than the ttl."""
        if record is None or record["released"]:
            return True
        if "unreadable" in record:
            return record["expires_unix"] < time.time()
        alive = self.holder_alive(record["holder"])
        if alive is not None:
            return not alive
        return record["expires_unix"] < time.time()

    def acquire(self, wait_s: float = 0.0, log: Callable[[str], object] = print, poll_s: float = 2.0) -> None:
        started, last_log, lost_claims = time.monotonic(), -1e9, 0
        while True:
            generation, record = self._current()
            if record is not None and record["holder"] == self.holder and not record["released"]:
                self.generation = generation  # ours already (another step of this run, a retry): renew it
                self.renew()
                return
            if self._free(record):
                if self._claim(generation + 1):
                    self.generation = generation + 1
                    if record is not None and "unreadable" in record:
                        log(f"partition {self.partition}: lease record {record['unreadable']}, older than the ttl "
                            f"of {self.ttl_s:.0f} s: treated as expired, took generation {generation + 1}")
                    elif record is not None and not record["released"]:
                        log(f"partition {self.partition}: took over the lease of run {record['holder']} "
                            "(expired or finished)")
                    return
                if lost_claims < 10:  # another writer claimed it between our read and our claim (a sibling step
                    lost_claims += 1  # of this run taking over the same dead run's lease, say): read it again
                    continue
            waited = time.monotonic() - started
            holder = record["holder"] if record else "?"
            if waited >= wait_s:
                raise LeaseHeld(self.partition, holder, waited)
            if time.monotonic() - last_log >= 30:
                log(f"partition {self.partition}: waiting for run {holder}, which is writing it "
                    f"(waited {waited:.0f} s of at most {wait_s:.0f} s)")
                last_log = time.monotonic()
            time.sleep(poll_s)

    def _claim(self, generation: int) -> bool:
        """Create the generation's record exclusively, then read it back: won only if the record that landed is ours
        (a store that ignores `If-None-Match` lets a later writer replace it)."""
        if not _exclusive_create(self.fs, self._path(generation), self._record()):
            return False
        landed, record = self._current()
        return landed == generation and record is not None and record.get("holder") == self.holder

    def check(self) -> None:
        """Fencing: raise `LeaseLost` unless this holder's generation is still the partition's current lease."""
        if self.generation is None:
            raise LeaseLost(self.partition, self.holder, "it was released")
        generation, record = self._current()
        if generation != self.generation:
            raise LeaseLost(self.partition, self.holder,
                            f"generation {generation} replaced its generation {self.generation}")
        if record is None or record.get("holder") != self.holder:
            raise LeaseLost(self.partition, self.holder, f"generation {generation} is held by run "
                            f"{record.get('holder') if record else '?'}")
        if record["released"]:
            raise LeaseLost(self.partition, self.holder, "it was released")

    def renew(self) -> None:
        """Extend this holder's record, unless the lease was taken over (then fencing fails its next write)."""
        if self.generation is not None:
            try:
                self.check()
            except LeaseLost:
                self._stop.set()  # renewing a generation that is no longer the lease would keep nothing
                return
            self.storage.write_bytes(self._storage_url(self.generation), self._record())

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        if self.generation is not None:
            generation, record = self._current()
            if generation == self.generation and record and record["holder"] == self.holder:
                self.storage.write_bytes(self._storage_url(self.generation), self._record(released=True))
            self._prune(generation)
            self.generation = None

    def _prune(self, newest: int) -> None:
        for old in range(max(1, newest - 20), newest - 1):  # keep the last two generations
            with contextlib.suppress(FileNotFoundError):
                remove_path(self.fs, self._path(old))

    def _storage_url(self, generation: int) -> str:
        """The record's URL, for the storage's one-GET `read_bytes` and atomic `write_bytes` (renewal, release)."""
        return posixpath.join(self.url, self._name(generation))

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.renew()
            except Exception as error:  # a missed renewal is retried; the ttl covers two misses
                self.missed_renewals.append(f"{type(error).__name__}: {str(error)[:160]}")

    @contextlib.contextmanager
    def held(self, wait_s: float = 0.0, log: Callable[[str], object] = print, release: bool = True,
             release_on_error: bool = True) -> Iterator[PartitionLease]:
        """Hold the lease (renewed in the background) for the block. `release=False` keeps it for a later step of
        the same run when the block succeeds; a block that raises releases it unless `release_on_error=False`
        (steps that run beside siblings of the same run keep it for them and for their own retry)."""
        self.acquire(wait_s, log)
        self._stop.clear()
        self.missed_renewals.clear()  # this block's, logged when it ends
        self._renewer = threading.Thread(target=self._renew_forever, daemon=True, name=f"lease-{self.partition}")
        self._renewer.start()
        succeeded = False
        try:
            yield self
            succeeded = True
        finally:
            if release or (not succeeded and release_on_error):
                self.release()
            else:
                self._stop.set()
                self._renewer.join()
            if self.missed_renewals:  # logged from this thread: a step's logger is not the renewer's to call
                log(f"partition {self.partition}: {len(self.missed_renewals)} renewal(s) of the lease failed and were "
                    f"retried (last: {self.missed_renewals[-1]}); a lease not renewed within its ttl of "
                    f"{self.ttl_s:.0f} s can be taken over")
