"""Small values passed between the steps of a run (shard specs, shard reports) as JSON in the output storage.

Why not Dagster's default: on Kubernetes each step runs in its own pod, so step outputs must live where
every pod can read them; the project's storage (local or S3) already is. Values are small dicts; audio and
tables never travel this way. Files go under `{storage}/.dagster-io/{run_id}/{step}/{output}[/{mapping_key}].json`.
"""

from __future__ import annotations

import json

import dagster as dg

from batch_assets.storage import StorageResource


class StorageJsonIOManager(dg.ConfigurableIOManager):
    storage: StorageResource

    def _url(self, context: dg.OutputContext) -> str:
        return self.storage.output_url(".dagster-io", *context.get_identifier()) + ".json"

    def handle_output(self, context: dg.OutputContext, obj) -> None:
        self.storage.write_bytes(self._url(context), json.dumps(obj).encode())

    def load_input(self, context: dg.InputContext):
        return json.loads(self.storage.read_bytes(self._url(context.upstream_output)))
