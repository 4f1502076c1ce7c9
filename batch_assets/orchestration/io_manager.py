"""Small values passed between the steps of a run (shard specs, shard reports) as JSON in the output storage.

Why not Dagster's default: on Kubernetes each step runs in its own pod, so step outputs must live where
every pod can read them; the project's storage (local or S3) already is. Values are small: the typed shard
specs and reports of `gpu/steps/shard_values.py`, tagged with their type; audio and tables never travel this way.
Files go under `{storage}/.dagster-io/{run_id}/{step}/{output}[/{mapping_key}].json`.

A failed run keeps its values (a re-execution from failure loads them); once it, or a re-execution of it, has
succeeded, its values are removed by the next assembly step of any run (`discard_run_values`: best effort, it
never fails the step).
"""

from __future__ import annotations

import json
import posixpath

import dagster as dg

from batch_assets.gpu.steps.shard_values import VALUE_TYPES, from_json, to_json
from batch_assets.storage.resource import StorageResource

VALUES_FOLDER = ".dagster-io"


class StorageJsonIOManager(dg.ConfigurableIOManager):
    storage: StorageResource

    def _url(self, context: dg.OutputContext) -> str:
        return self.storage.output_url(VALUES_FOLDER, *context.get_identifier()) + ".json"

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        self.storage.write_bytes(self._url(context), json.dumps(to_json(obj)).encode())

    def load_input(self, context: dg.InputContext):
        upstream = context.upstream_output
        value = from_json(json.loads(self.storage.read_bytes(self._url(upstream))))
        if isinstance(value, dict) and (written_as := _declared_type(upstream)) in VALUE_TYPES.values():
            return written_as.from_json(value)  # written untagged, by an older deploy: the type its step declares now
        return value


def _declared_type(output: dg.OutputContext) -> type | None:
    """The Python type the upstream step declares for this output (the same for a fan-in list's every item)."""
    try:
        return getattr(output.dagster_type, "typing_type", None)
    except dg.DagsterInvariantViolationError:  # an output context built without its type (none in a run)
        return None


def discard_run_values(storage: StorageResource, instance: dg.DagsterInstance, recent: int = 1000) -> list[str]:
    """Remove the step values of every run that succeeded, and of every run a succeeded run re-executed (its
    ancestors: nothing re-executes from them any more), among the `recent` latest successes. Values of other
    runs are kept (a re-execution from failure loads them), the calling run's own included (a later run removes
    them once this one has succeeded). Returns the run ids removed."""
    fs, root = storage.filesystem(storage.url(VALUES_FOLDER))
    try:
        listed = {posixpath.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)}
    except FileNotFoundError:
        return []
    finished: set[str] = set()
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]), limit=recent):
        current: dg.DagsterRun | None = run
        while current is not None and current.run_id not in finished:
            finished.add(current.run_id)
            current = instance.get_run_by_id(current.parent_run_id) if current.parent_run_id else None
    removed = sorted(listed & finished)
    for run_id in removed:
        storage.remove_tree(storage.url(VALUES_FOLDER, run_id))
    return removed
