"""Small values passed between the steps of a run (shard specs, shard reports) as JSON in the output storage.

Why not Dagster's default: on Kubernetes each step runs in its own pod, so step outputs must live where
every pod can read them; the project's storage (local or S3) already is. Values are small dicts; audio and
tables never travel this way. Files go under `{storage}/.dagster-io/{run_id}/{step}/{output}[/{mapping_key}].json`.

A failed run keeps its values (a re-execution from failure loads them); once a run of a lineage succeeds, the
values of the whole lineage, and those of any other run that succeeded, are removed (`discard_run_values`,
called by the last GPU step).
"""

from __future__ import annotations

import json
import posixpath

import dagster as dg

from batch_assets.storage import StorageResource

VALUES_FOLDER = ".dagster-io"


class StorageJsonIOManager(dg.ConfigurableIOManager):
    storage: StorageResource

    def _url(self, context: dg.OutputContext) -> str:
        return self.storage.output_url(VALUES_FOLDER, *context.get_identifier()) + ".json"

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        self.storage.write_bytes(self._url(context), json.dumps(obj).encode())

    def load_input(self, context: dg.InputContext):
        return json.loads(self.storage.read_bytes(self._url(context.upstream_output)))


def discard_run_values(storage: StorageResource, instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    """Remove the step values of `run`'s lineage (it and the runs it re-executes: none needs them once it
    succeeds) and of every other run the instance knows as succeeded; returns the run ids removed."""
    lineage = []
    current: dg.DagsterRun | None = run
    while current is not None:
        lineage.append(current.run_id)
        current = instance.get_run_by_id(current.parent_run_id) if current.parent_run_id else None
    fs, root = storage.filesystem(storage.url(VALUES_FOLDER))
    try:
        listed = [posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)]
    except FileNotFoundError:
        listed = []
    removed = []
    for run_id in listed:
        if run_id not in lineage:
            other = instance.get_run_by_id(run_id)
            if other is None or other.status != dg.DagsterRunStatus.SUCCESS:
                continue  # a failed run's values serve its re-execution; an unknown run may be another instance's
        storage.remove_tree(storage.url(VALUES_FOLDER, run_id))
        removed.append(run_id)
    return removed
