"""What made a flight's commit: the deployment identity each commit records and a resume compares. No Dagster.

Why: a partition whose run failed on Friday and is re-executed from failure on Monday, after a redeploy, would
otherwise keep Friday's flights beside Monday's: one partition, two models or two schemas, published as one. A
commit (`gpu/outputs/commits.py`) therefore records everything that would change its results, and a resume reuses it
only when all of it is what the resumed step would use:
- the tables' schema version: a digest of every table and fragment schema (columns and types), so a changed column
  changes it without anyone remembering to bump a number;
- the package version (`batch_assets`, from its installed metadata) and a digest of its Python sources: the
  version in `pyproject.toml` is not bumped for every image, the code is what ran;
- each model's identity (`models/identity.py`: its name or path, and the sha256 of its local files): the ASR
  routing (`asr en`, `asr de`, ...), language identification and the diarization pipeline;
- the result-changing switches (kinds "numbers" and "approximate", `switches.py`) and the word-confidence setting.
The exact levers are not part of it: they change no result (the exact gate proves it), so a resume with one
switched off reuses every commit.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import pathlib
from collections.abc import Mapping
from typing import Any

from batch_assets.gpu.outputs.tables import OUTCOMES_SCHEMA, TABLE_SCHEMAS
from batch_assets.models.identity import ModelIdentity, files_sha256, model_identity
from batch_assets.switches import SWITCHES

RESULT_SWITCHES = tuple(s.name for s in SWITCHES if s.kind in ("numbers", "approximate"))


def schema_version() -> str:
    """A digest of the GPU tables' schemas and the committed fragments': it changes with any column or type."""
    schemas = {f"{asset}/{name}": schema for (asset, name), schema in TABLE_SCHEMAS.items()}
    schemas["fragments/outcomes"] = OUTCOMES_SCHEMA
    text = json.dumps({key: {col: str(dtype) for col, dtype in schema.items()} for key, schema in schemas.items()},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2]  # batch_assets/ (this file: batch_assets/gpu/outputs/)


def package_sources() -> list[pathlib.Path]:
    """Every `.py` file of the package: what the package version's digest covers."""
    return sorted(PACKAGE_ROOT.rglob("*.py"))


@functools.cache
def package_version() -> str:
    """`0.1.0+src.<digest of every .py file of the package>`: a redeploy with other code is another version."""
    digest = files_sha256(PACKAGE_ROOT, package_sources())[:12]
    return f"{importlib.metadata.version('batch_assets')}+src.{digest}"


@dataclasses.dataclass(frozen=True)
class CommitIdentity:
    schema_version: str
    package_version: str
    models: dict[str, ModelIdentity]  # role ("asr en", "language id", "diarization") -> identity
    switches: dict[str, bool]  # the result-changing switches (RESULT_SWITCHES) as the step runs them
    word_confidence: bool

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def differences(self, recorded: Mapping[str, Any] | None) -> list[str]:
        """What differs between a commit's recorded identity and this one, one phrase each ("asr en: old -> new");
        empty when the commit may be reused."""
        if recorded is None:
            return ["the commit records no identity (made before commits recorded one)"]
        found = []
        for field, label in (("schema_version", "tables schema version"), ("package_version", "package version"),
                             ("word_confidence", "word confidence")):
            if recorded.get(field) != getattr(self, field):
                found.append(f"{label}: {recorded.get(field)} -> {getattr(self, field)}")
        old_models = {role: ModelIdentity(**value) for role, value in (recorded.get("models") or {}).items()}
        for role in sorted(set(old_models) | set(self.models)):
            old, new = old_models.get(role), self.models.get(role)
            if old != new:
                found.append(f"{role}: {old.text() if old else 'none'} -> {new.text() if new else 'none'}")
        old_switches = recorded.get("switches") or {}
        for name in sorted(set(old_switches) | set(self.switches)):
            if old_switches.get(name) != self.switches.get(name):
                found.append(f"{name}: {old_switches.get(name)} -> {self.switches.get(name)}")
        return found


def commit_identity(routing: Mapping[str, str], language_id_model: str, diarization_pipeline: str,
                    switches: Mapping[str, bool], word_confidence: bool) -> CommitIdentity:
    """The identity a step's commits record and its resume compares: `routing` (language -> ASR model), the other
    two models, every switch's value as the step runs it (only the result-changing ones are kept)."""
    models = {f"asr {language}": model_identity(name) for language, name in sorted(routing.items())}
    models["language id"] = model_identity(language_id_model)
    models["diarization"] = model_identity(diarization_pipeline)
    return CommitIdentity(schema_version(), package_version(), models,
                          {name: bool(switches[name]) for name in RESULT_SWITCHES}, bool(word_confidence))
