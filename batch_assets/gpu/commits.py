"""Flight commits: each finished flight's results, written durably before the next flight's are kept.

Why: a GPU step on a preemptible node that dies must not lose the flights it finished. A step retry, a
run retry from failure or a re-execution from failure of the same run (the same *root* run id) finds the
committed flights and resumes after them; a new run (a new root) starts from scratch.

Layout (through `StorageResource`, so S3 works), per partition and root run:
`{storage}/gpu_work/{partition}/{root_run_id}/{flight_id}/{vad_units,regions,turns,speakers,outcomes,words}.parquet`
plus the flight's VAD score arrays, written straight to where the final `vad_scores` table will point
(`vad_scores/{partition}/scores/{root_run_id}/{unit_id}.npy`), and last a commit record
`{flight_id}.commit.json` listing every file with its size. A flight counts as committed only when its
record exists and every file it lists has that size: a commit cut off halfway (a kill between two
writes) is detected and the flight is processed again, overwriting its fragments, so no row is ever
written twice. The final tables are assembled from the commits (`tables`) once every shard succeeded;
then the work folder is removed (`discard`). Nothing here is visible to readers of the asset tables.
"""

from __future__ import annotations

import json

import polars as pl

from batch_assets.gpu.tables import (
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

WORK_ASSET = "gpu_work"
FRAGMENTS = {"vad_units": VAD_UNITS_SCHEMA, "regions": REGIONS_SCHEMA, "turns": TURNS_SCHEMA,
             "speakers": SPEAKERS_SCHEMA, "outcomes": OUTCOMES_SCHEMA, "words": WORDS_SCHEMA}


class FlightCommits:
    """The committed flights of one partition under one root run."""

    def __init__(self, storage, partition: str, root_run_id: str):
        self.storage, self.partition, self.root_run_id = storage, partition, root_run_id

    def _url(self, *name: str) -> str:
        return self.storage.output_url(WORK_ASSET, self.partition, self.root_run_id, *name)

    def scores_name(self, unit_id: str) -> str:
        """Where a unit's score array goes, relative to the `vad_scores` partition folder."""
        return f"scores/{self.root_run_id}/{unit_id}"

    def _record(self, flight_id: str) -> dict | None:
        try:
            return json.loads(self.storage.read_bytes(self._url(f"{flight_id}.commit.json")))
        except FileNotFoundError:
            return None

    def committed(self, flight_id: str) -> bool:
        """Whether the flight's commit is whole: its record, and every file it lists at the recorded size."""
        record = self._record(flight_id)
        if record is None:
            return False
        for url, size in record["files"].items():
            fs, path = self.storage.filesystem(url)
            try:
                if fs.size(path) != size:
                    return False
            except FileNotFoundError:
                return False
        return True

    def commit(self, flight_id: str, outcomes: list) -> dict:
        """Write one flight's results, then its record (last: the record is what makes the commit count)."""
        files: dict[str, int] = {}

        def track(url: str) -> str:
            fs, path = self.storage.filesystem(url)
            files[url] = fs.size(path)
            return url

        def write_scores(unit_id, array) -> str:
            return track(self.storage.write_array(array, "vad_scores", self.partition, self.scores_name(unit_id)))

        vad_units, regions = vad_tables(outcomes, write_scores)
        turns, speakers = diarization_tables(outcomes)
        units, words = outcome_tables(outcomes)
        frames = {"vad_units": vad_units, "regions": regions, "turns": turns, "speakers": speakers,
                  "outcomes": units, "words": words}
        for name, frame in frames.items():
            track(self.storage.write_parquet(frame, WORK_ASSET, self.partition, f"{self.root_run_id}/{flight_id}/{name}"))
        record = {"flight_id": flight_id, "units": units["unit_id"].to_list(), "files": files}
        self.storage.write_bytes(self._url(f"{flight_id}.commit.json"), json.dumps(record).encode())
        return record

    def scores_paths(self, flight_ids: list[str]) -> list[str]:
        """The score arrays the flights' commits wrote (filesystem paths, as `PartitionOutputs` tracks them)."""
        paths = []
        for flight_id in flight_ids:
            record = self._record(flight_id) or {"files": {}}
            paths += [self.storage.filesystem(url)[1] for url in record["files"] if url.endswith(".npy")]
        return paths

    def tables(self, flight_ids: list[str]) -> dict[str, pl.DataFrame]:
        """Every fragment of the flights, concatenated in the order given (the plan's); raises if one is missing."""
        missing = [f for f in flight_ids if not self.committed(f)]
        if missing:
            raise RuntimeError(f"{self.partition}: flights {missing} have no whole commit under run {self.root_run_id}: "
                               "rerun the partition's GPU steps")
        parts: dict[str, list[pl.DataFrame]] = {name: [] for name in FRAGMENTS}
        for flight_id in flight_ids:
            for name in FRAGMENTS:
                parts[name].append(self.storage.read_parquet(WORK_ASSET, self.partition, f"{self.root_run_id}/{flight_id}/{name}"))
        # diagonal, on the schema's empty frame: a flight committed before a column was added (a run resumed
        # across a deploy) gets nulls in it rather than failing the assembly
        return {name: pl.concat([pl.DataFrame(schema=FRAGMENTS[name]), *frames], how="diagonal").select(list(FRAGMENTS[name]))
                for name, frames in parts.items()}

    def discard(self) -> None:
        """Remove this partition's work folder, every root's (after the tables are in place)."""
        fs, path = self.storage.filesystem(self.storage.output_url(WORK_ASSET, self.partition))
        if fs.exists(path):
            fs.rm(path, recursive=True)
