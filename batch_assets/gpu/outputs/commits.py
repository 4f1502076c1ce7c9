"""Flight commits: each finished flight's results, written durably before the next flight's are kept.

Why: a GPU step on a preemptible node that dies must not lose the flights it finished. A step retry, a
run retry from failure or a re-execution from failure of the same run (the same *root* run id) finds the
committed flights and processes only the others; so does a new run (`batch-assets run` after a Ctrl-C, a run
launched again after one failed or was killed with its pod): a flight without a valid commit under its own root
reuses a valid one (same fingerprint, same identity, whole) of any other root run of the partition, read where it
lies (`reused`; the shard report and the run's metadata name the run it came from), unless it holds a unit whose
object could not be read (`fetch_failed`, `changed_since_listed`: the record's `unread`): a read that failed is read
again by the next run, never kept as its result.

Layout (through `StorageResource`, so S3 works), per partition and root run:
`{storage}/gpu_work/{partition}/{root_run_id}/{flight_id}/{vad_units,regions,turns,speakers,outcomes,words}.parquet`
plus the flight's VAD score arrays, written straight to where the final `vad_scores` table will point
(`vad_scores/{partition}/scores/{root_run_id}/{unit_id}.{digest of its content}.npy`: a flight computed again, by a
re-execution of a run whose commits another run reused and published, never writes over the arrays those tables
point to), and last a commit record
`{flight_id}.commit.json` listing every file with its size and the flight's fingerprint (`gpu/steps/resume.py`).
The record also holds the deployment identity it was made under (`gpu/outputs/commit_identity.py`: the tables' schema
version, the package version, each model's name and checksum, the result-changing switches).
A flight counts as committed only when its record exists, names the fingerprint the current plan gives the
flight and the identity the judging step runs under, and every file it lists has that size: a commit cut off
halfway (a kill between two writes), one made for another plan (`prepared_flights` rematerialized in between)
or one made under another deployment (a resume after a redeploy changed a model, a switch's default, the
schemas or the package) is detected and the flight is processed again, overwriting its fragments, so no row is
ever written twice and two plans or two deployments never mix. The final tables
are assembled from the commits (`tables`); then `mark_assembled` records that this root run wrote the
partition (`{root_run_id}.assembled.json`, so that a re-execution of a run that failed later, e.g. on a
backfill's next partition, does not redo it) and `discard` removes every other file of the partition's work
folder: the published tables hold the fragments' rows, and the score arrays they point to (under `vad_scores/`,
a reused commit's under its own root's folder) are kept by the table replacement, which removes only the arrays
the new tables no longer reference. Nothing here is visible to readers of the asset tables.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable

import numpy as np
import polars as pl

from batch_assets.gpu.outputs.commit_identity import CommitIdentity
from batch_assets.gpu.outputs.tables import (
    OUTCOMES_SCHEMA,
    REGIONS_SCHEMA,
    SPEAKERS_SCHEMA,
    TURNS_SCHEMA,
    VAD_UNITS_SCHEMA,
    WORDS_SCHEMA,
    diarization_tables,
    outcome_tables,
    vad_tables,
)
from batch_assets.schema.results import UNREAD_CLASSES
from batch_assets.storage.paths import is_local, remove_empty_folders, remove_path

WORK_ASSET = "gpu_work"
FRAGMENTS = {"vad_units": VAD_UNITS_SCHEMA, "regions": REGIONS_SCHEMA, "turns": TURNS_SCHEMA,
             "speakers": SPEAKERS_SCHEMA, "outcomes": OUTCOMES_SCHEMA, "words": WORDS_SCHEMA}


NOT_COMMITTED = "not committed"
ANOTHER_DEPLOYMENT = "made under another deployment"


def why_kind(why: str) -> str:
    """A redo reason without its particulars, for counting: "committed for another plan", "commit cut off", or
    "made under another deployment: asr en, tf32_enabled" (what differed, without the values)."""
    if why.startswith(ANOTHER_DEPLOYMENT):
        differences = why[len(ANOTHER_DEPLOYMENT) + 2:-1].split("; ")
        return f"{ANOTHER_DEPLOYMENT}: " + ", ".join(d.split(":")[0] for d in differences)
    return why.split(" (")[0]


class FlightCommits:
    """The committed flights of one partition under one root run, made under one deployment identity."""

    def __init__(self, storage, partition: str, root_run_id: str, identity: CommitIdentity,
                 fence: Callable[[], None] = lambda: None):
        """`identity`: what this step's commits record and what a commit must have recorded to count
        (`gpu/outputs/commit_identity.py`). `fence`: raises unless this run still holds the partition's lease
        (`PartitionLease.check`); called before every commit, marker and removal."""
        self.storage, self.partition, self.root_run_id, self.fence = storage, partition, root_run_id, fence
        self.identity = identity
        self._others: dict[str, list[str]] | None = None
        self.reused: dict[str, str] = {}  # flight_id -> the other root run whose valid commit `problem` found
        self._valid: dict[str, dict] = {}  # flight_id -> the record of the valid commit `problem` found

    def _url(self, *name: str) -> str:
        return self._url_in(self.root_run_id, *name)

    def stitched_scores_name(self, unit_id: str, windows: list) -> str:
        """Where a windowed unit's stitched array goes: named by what it is made of (`windows`: each window's place
        and its array's content-named URI), so a later assembly of other windows never writes over it."""
        made_of = hashlib.sha256(json.dumps(windows, sort_keys=True).encode()).hexdigest()[:16]
        return f"{self.scores_name(unit_id)}.{made_of}"

    def scores_name(self, unit_id: str) -> str:
        """Where a unit's score array goes, relative to the `vad_scores` partition folder."""
        return f"scores/{self.root_run_id}/{unit_id}"

    def _record(self, root: str, flight_id: str) -> dict | None:
        try:
            return json.loads(self.storage.read_bytes(self._url_in(root, f"{flight_id}.commit.json")))
        except FileNotFoundError:
            return None

    def _url_in(self, root: str, *name: str) -> str:
        return self.storage.output_url(WORK_ASSET, self.partition, root, *name)

    def _other_roots(self) -> dict[str, list[str]]:
        """Each flight's commit records under the partition's other root runs (a stopped, failed or killed run's),
        listed once: flight_id -> root run ids."""
        if self._others is None:
            fs, base = self.storage.filesystem(self.storage.output_url(WORK_ASSET, self.partition))
            found: dict[str, list[str]] = {}
            for path in (fs.find(base) if fs.exists(base) else []):
                parts = path[len(base.rstrip("/")) + 1:].split("/")
                if len(parts) == 2 and parts[1].endswith(".commit.json") and parts[0] != self.root_run_id:
                    found.setdefault(parts[1].removesuffix(".commit.json"), []).append(parts[0])
            self._others = {flight_id: sorted(roots) for flight_id, roots in found.items()}
        return self._others

    def problem(self, flight_id: str, fingerprint: str) -> str | None:
        """Why the flight has no valid commit for `fingerprint` (None: it has one, whole, for that plan and this
        identity): this root run's, else another root run's of the partition, which is then reused (`reused`)."""
        self.reused.pop(flight_id, None)
        self._valid.pop(flight_id, None)
        why = self._judge(self.root_run_id, flight_id, fingerprint)
        if why is None:
            return None
        for other in self._other_roots().get(flight_id, []):
            if self._judge(other, flight_id, fingerprint) is not None:
                continue
            if (not_kept := _not_reusable(self._valid[flight_id], other)) is not None:
                del self._valid[flight_id]
                why = not_kept
                continue
            self.reused[flight_id] = other
            return None
        return why

    def _judge(self, root: str, flight_id: str, fingerprint: str) -> str | None:
        """Why `root`'s commit of the flight is not valid (None: it is, and its record is kept for `device_types`)."""
        record = self._record(root, flight_id)
        if record is None:
            return NOT_COMMITTED
        if record.get("fingerprint") != fingerprint:
            return (f"committed for another plan (units, durations, listed objects, hints or languages differ: "
                    f"fingerprint {record.get('fingerprint')} vs {fingerprint} now)")
        if differences := self.identity.differences(record.get("identity")):
            return f"{ANOTHER_DEPLOYMENT} ({'; '.join(differences)})"
        for url, size in record["files"].items():
            try:
                if (found := self.storage.size(url)) != size:
                    return f"commit cut off ({url} has {found} bytes, {size} recorded)"
            except FileNotFoundError:
                return f"commit cut off ({url} is missing)"
        self._valid[flight_id] = record
        return None

    def commit(self, flight_id: str, outcomes: list, fingerprint: str, nemo_fixes_absent: tuple[str, ...] = ()) -> dict:
        """Write one flight's results, then its record (last: the record is what makes the commit count).
        `nemo_fixes_absent`: the NeMo fixes this process could not install, recorded in its identity (such a commit
        counts for its own run, never reused by another)."""
        self.fence()
        self._valid.pop(flight_id, None)  # judged again before it is read
        files: dict[str, int] = {}

        def track(url: str) -> str:
            files[url] = self.storage.size(url)
            return url

        def write_scores(unit_id, array) -> str:  # named by its content: never written over (below)
            return track(self.storage.write_array(array, "vad_scores", self.partition,
                                                  f"{self.scores_name(unit_id)}.{array_digest(array)}"))

        vad_units, regions = vad_tables(outcomes, write_scores)
        turns, speakers = diarization_tables(outcomes)
        units, words = outcome_tables(outcomes)
        frames = {"vad_units": vad_units, "regions": regions, "turns": turns, "speakers": speakers,
                  "outcomes": units, "words": words}
        for name, frame in frames.items():
            track(self.storage.write_parquet(frame, WORK_ASSET, self.partition,
                                             f"{self.root_run_id}/{flight_id}/{name}"))
        record = {"flight_id": flight_id, "fingerprint": fingerprint, "root_run_id": self.root_run_id,
                  "identity": dataclasses.replace(self.identity.used_by(outcomes),
                                                  nemo_fixes_absent=tuple(nemo_fixes_absent)).to_json(),
                  "units": units["unit_id"].to_list(), "files": files,
                  "unread": units.filter(pl.col("result_class").is_in([str(c) for c in UNREAD_CLASSES]))["unit_id"]
                  .to_list()}
        self.fence()
        self.storage.write_bytes(self._url(f"{flight_id}.commit.json"), json.dumps(record).encode())
        return record

    def problems(self, fingerprints: dict[str, str]) -> dict[str, str]:
        """Each flight (of `{flight_id: fingerprint}`) without a valid commit, and why."""
        found = {flight_id: self.problem(flight_id, fingerprint) for flight_id, fingerprint in fingerprints.items()}
        return {flight_id: why for flight_id, why in found.items() if why is not None}

    def tables(self, fingerprints: dict[str, str]) -> dict[str, pl.DataFrame]:
        """Every fragment of the flights (`{flight_id: fingerprint}`, in plan order), concatenated; raises if one
        lacks a valid commit."""
        missing = self.problems(fingerprints)
        if missing:
            raise RuntimeError(f"{self.partition}: flights {sorted(missing)} have no valid commit under run "
                               f"{self.root_run_id}: rerun the partition's GPU steps")
        return self.fragments(list(fingerprints))

    def device_types(self, flight_ids: list[str]) -> dict[str, str | None]:
        """The device type each flight's valid commit was made on (its record's identity, as `problem` read it)."""
        return {flight_id: (self._valid[flight_id].get("identity") or {}).get("device_type")
                for flight_id in flight_ids}

    def fragments(self, flight_ids: list[str]) -> dict[str, pl.DataFrame]:
        """Every fragment of the flights, concatenated in the order given, their commits already validated (each
        read from the root run whose commit `problem` found)."""
        parts: dict[str, list[pl.DataFrame]] = {name: [] for name in FRAGMENTS}
        for flight_id in flight_ids:
            root = self.reused.get(flight_id, self.root_run_id)
            for name in FRAGMENTS:
                parts[name].append(self.storage.read_parquet(WORK_ASSET, self.partition, f"{root}/{flight_id}/{name}"))
        # diagonal, on the schema's empty frame: every fragment comes out with the schema's columns in its order
        return {name: pl.concat([pl.DataFrame(schema=FRAGMENTS[name]), *frames], how="diagonal")
                      .select(list(FRAGMENTS[name])) for name, frames in parts.items()}

    def _marker_url(self) -> str:
        return self._url() + ".assembled.json"

    def mark_assembled(self, plan_fingerprint: str, run_id: str) -> None:
        """Record that this root run wrote the partition's tables from the plan `plan_fingerprint`."""
        self.fence()
        self.storage.write_bytes(self._marker_url(), json.dumps(
            {"root_run_id": self.root_run_id, "run_id": run_id, "plan": plan_fingerprint}).encode())

    def assembled(self) -> dict | None:
        """This root run's assembled record for the partition (None: not assembled by this root run)."""
        try:
            return json.loads(self.storage.read_bytes(self._marker_url()))
        except FileNotFoundError:
            return None

    def discard(self) -> int:
        """Remove the partition's work folder (every root's commits and markers) but this root's marker; returns
        how many files were removed."""
        self.fence()
        fs, root = self.storage.filesystem(self.storage.output_url(WORK_ASSET, self.partition))
        keep = self.storage.filesystem(self._marker_url())[1]
        removed = 0
        for path in (fs.find(root) if fs.exists(root) else []):
            if path != keep:
                remove_path(fs, path)
                removed += 1
        if is_local(fs) and fs.exists(root):
            remove_empty_folders(root)
        return removed


def _not_reusable(record: dict, root: str) -> str | None:
    """Why root run `root`'s valid commit is still no result for another run to reuse (None: it is one): a unit it
    could not read, or a NeMo fix its process could not install."""
    if unread := record.get("unread"):
        return f"run {root}'s commit holds {len(unread)} unit(s) it could not read ({unread[:3]}): read again"
    if absent := (record.get("identity") or {}).get("nemo_fixes_absent"):
        return f"run {root}'s commit was made without the NeMo fixes {', '.join(absent)}: made again"
    return None


def array_digest(array: np.ndarray) -> str:
    """16 hex digits of sha256 over an array's dtype, shape and bytes."""
    digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()[:16]
