"""What made a flight's commit: the deployment identity each commit records and a resume compares. No Dagster.

Why: a partition whose run failed on Friday and is re-executed from failure on Monday, after a redeploy, would
otherwise keep Friday's flights beside Monday's: one partition, two models or two schemas, published as one. A
commit (`gpu/outputs/commits.py`) therefore records everything that would change its results, and a resume reuses it
only when all of it is what the resumed step would use:
- the tables' schema version: a digest of every table and fragment schema (columns and types), so a changed column
  changes it without anyone remembering to bump a number;
- the package version (`batch_assets`, from its installed metadata) and a digest of the code that makes results
  (`RESULT_CODE`): the rooms a flight's audio and results pass through (source objects and their decoding, ingest,
  long units, the models, the schemas, the section core, ASR, diarization, the adapters, the device, the outputs, the
  switches), each module's text without its docstrings and comments (the same on Python 3.11 and 3.12). The line: code
  that runs between an object's bytes and a flight's commit is in (with `gpu/steps/shard_work.py`, which gives each
  unit its hints, language and levers); the CLI, the orchestration (Dagster glue, schedules, sensors), the GPU steps'
  other bookkeeping, storage, exports, the gate, training and the settings are out (training makes weights, identified
  by their checksum; what the steps pass to the section that changes results is in the flight's fingerprint:
  `gpu/steps/resume.py`). A docstring, a comment or a CLI edit redoes nothing; any other edit of a module in the line
  redoes every commit;
- the models each flight used (`models/identity.py`: a name or path with the sha256 of its local files, a hub
  name with the revision its cache resolved): the diarization pipeline, language identification when one of its
  units' languages was detected, and the ASR model of each language its units were heard in (none, for a
  language without one). Changing the `ja` model redoes only the flights that heard Japanese;
- the device type the GPU steps run on (CPU or CUDA: TF32 and half precision act only on CUDA), which the GPU
  steps compare (a CPU step, the leftover listing or the assembly, runs on another device than the GPU steps and
  leaves the device type to them; the assembly refuses commits of two), and the segmentation, embedding and ASR
  batch sizes (a batch's shape can move the last bits of a score);
- the versions of torch, NeMo and pyannote.audio (`RESULT_LIBRARIES`, from their metadata); and the NeMo fixes a
  GPU step could not install (`gpu/adapters/nemo_adapter.py`: its NeMo's source was not the one they were written
  for): a commit that records one counts for its own run only, never reused by another;
- the result-changing switches (kinds "numbers", "approximate" and "path", `switches.py`) and the word-confidence
  setting.
The exact levers are not part of it: they change no result (the exact gate proves it), so a resume with one
switched off reuses every commit.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib.metadata
import io
import json
import pathlib
import tokenize
from collections.abc import Mapping
from typing import Any

from batch_assets.gpu.outputs.tables import OUTCOMES_SCHEMA, TABLE_SCHEMAS
from batch_assets.ingest.unit_language import DETECTED
from batch_assets.models.identity import ModelIdentity, model_identity
from batch_assets.switches import SWITCHES

RESULT_SWITCHES = tuple(s.name for s in SWITCHES if s.kind in ("numbers", "approximate", "path"))


def schema_version() -> str:
    """A digest of the GPU tables' schemas and the committed fragments': it changes with any column or type."""
    schemas = {f"{asset}/{name}": schema for (asset, name), schema in TABLE_SCHEMAS.items()}
    schemas["fragments/outcomes"] = OUTCOMES_SCHEMA
    text = json.dumps({key: {col: str(dtype) for col, dtype in schema.items()} for key, schema in schemas.items()},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[2]  # batch_assets/ (this file: batch_assets/gpu/outputs/)
# the code that makes results (the module docstring draws the line), relative to the package
RESULT_CODE = ("source", "ingest", "long_units", "models", "schema", "gpu/section", "gpu/asr", "gpu/diarization",
               "gpu/adapters", "gpu/device", "gpu/outputs", "gpu/steps/shard_work.py", "switches.py")
# the libraries whose versions a commit records: their kernels and defaults move numbers
RESULT_LIBRARIES = ("torch", "nemo_toolkit", "pyannote.audio")


def package_sources(root: pathlib.Path = PACKAGE_ROOT) -> list[pathlib.Path]:
    """The `.py` files the code digest covers: those of `RESULT_CODE`."""
    found = []
    for part in RESULT_CODE:
        path = root / part
        found += [path] if path.suffix == ".py" else path.rglob("*.py")
    return sorted(found)


def code_text(path: pathlib.Path) -> str:
    """A module's source without its docstrings and comments, each line stripped of trailing blanks, blank lines
    left out: what its code does, not what it says. Text, not `ast.dump` (which differs between Python 3.11 and
    3.12): two hosts with the same code, whatever their interpreter, have the same digest."""
    source = path.read_text()
    lines = source.splitlines()
    drop: set[int] = set()  # 0-based lines of docstrings
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            drop.update(range(body[0].lineno - 1, body[0].end_lineno))
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            row, col = token.start
            lines[row - 1] = lines[row - 1][:col]
    return "\n".join(line.rstrip() for i, line in enumerate(lines) if i not in drop and line.strip())


def code_digest(root: pathlib.Path = PACKAGE_ROOT) -> str:
    """One digest of the result code's texts (`code_text`), each under its path relative to `root`."""
    digest = hashlib.sha256()
    for path in package_sources(root):
        digest.update(f"{path.relative_to(root).as_posix()}\n{code_text(path)}\n".encode())
    return digest.hexdigest()


@functools.cache
def library_versions() -> dict[str, str | None]:
    """The installed versions of `RESULT_LIBRARIES` (from their metadata: nothing imported; None: not installed)."""
    found = {}
    for name in RESULT_LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


@functools.cache
def package_version() -> str:
    """`0.1.0+src.<digest of the result code>`: a redeploy whose results may differ is another version."""
    return f"{importlib.metadata.version('batch_assets')}+src.{code_digest()[:12]}"


@dataclasses.dataclass(frozen=True)
class CommitIdentity:
    schema_version: str
    package_version: str
    models: dict[str, ModelIdentity | None]  # role ("asr en", "language id", "diarization") -> identity; a commit
    # records the roles its flight used (`used_by`), None for a language heard without a model
    switches: dict[str, bool]  # the result-changing switches (RESULT_SWITCHES) as the step runs them
    word_confidence: bool
    segmentation_batch_size: int | None = None
    device_type: str | None = None  # "cpu" or "cuda" where the GPU steps judge; None: not judged (a CPU step)
    embedding_batch_size: int | None = None
    asr_batch_size: int | None = None  # as configured (0: by device, which `device_type` pins)
    libraries: dict[str, str | None] = dataclasses.field(default_factory=dict)  # `library_versions()`
    nemo_fixes_absent: tuple[str, ...] = ()  # NeMo fixes the step could not install (its source changed): such a
    # commit counts for its own run (made as the rest of that run's), never for another's (`commits.py: problem`)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def used_by(self, outcomes: list) -> CommitIdentity:
        """This identity with only the models a flight's `outcomes` (`section.flight.UnitOutcome`s) used: the
        diarization pipeline, language identification if a language was detected (or its detection failed), and
        the ASR model of each language heard (None: no model for it), on each channel of a unit read by channel."""
        roles = {"diarization"}
        for outcome in outcomes:
            if "language identification" in (outcome.reason or ""):
                roles.add("language id")
            for language, source in [(outcome.language, outcome.language_source), *outcome.channel_languages]:
                roles |= {"language id"} if source == DETECTED else set()
                roles |= {f"asr {language}"} if language is not None else set()
        return dataclasses.replace(self, models={role: self.models.get(role) for role in sorted(roles)})

    def differences(self, recorded: Mapping[str, Any] | None) -> list[str]:
        """What differs between a commit's recorded identity and this one, one phrase each ("asr en: old -> new");
        empty when the commit may be reused. Only the models the commit recorded (those its flight used) count."""
        if recorded is None:
            return ["the commit records no identity (made before commits recorded one)"]
        found = []
        fields = [("schema_version", "tables schema version"), ("package_version", "package version"),
                  ("word_confidence", "word confidence"), ("segmentation_batch_size", "segmentation batch size"),
                  ("embedding_batch_size", "embedding batch size"), ("asr_batch_size", "ASR batch size"),
                  ("libraries", "libraries")]
        if self.device_type is not None:
            fields.append(("device_type", "device type"))
        for field, label in fields:
            if recorded.get(field) != getattr(self, field):
                found.append(f"{label}: {recorded.get(field)} -> {getattr(self, field)}")
        old_models = {role: ModelIdentity(**value) if value else None
                      for role, value in (recorded.get("models") or {}).items()}
        for role in sorted(old_models):
            old, new = old_models[role], self.models.get(role)
            if old != new:
                found.append(f"{role}: {old.text() if old else 'none'} -> {new.text() if new else 'none'}")
        old_switches = recorded.get("switches") or {}
        for name in sorted(set(old_switches) | set(self.switches)):
            if old_switches.get(name) != self.switches.get(name):
                found.append(f"{name}: {old_switches.get(name)} -> {self.switches.get(name)}")
        return found


def commit_identity(routing: Mapping[str, str], language_id_model: str, diarization_pipeline: str,
                    switches: Mapping[str, bool], word_confidence: bool, segmentation_batch_size: int | None = None,
                    device_type: str | None = None, embedding_batch_size: int | None = None,
                    asr_batch_size: int | None = None) -> CommitIdentity:
    """The identity a step's commits record and its resume compares: `routing` (language -> ASR model), the other
    two models, every switch's value as the step runs it (only the result-changing ones are kept), the batch sizes,
    the model libraries' versions, and (a GPU step) the device type it runs on."""
    models = {f"asr {language}": model_identity(name) for language, name in sorted(routing.items())}
    models["language id"] = model_identity(language_id_model)
    models["diarization"] = model_identity(diarization_pipeline)
    return CommitIdentity(schema_version(), package_version(), models,
                          {name: bool(switches[name]) for name in RESULT_SWITCHES}, bool(word_confidence),
                          segmentation_batch_size, device_type, embedding_batch_size, asr_batch_size,
                          dict(library_versions()))
