"""What names a model in a flight's commit record: its name or path, and a checksum of its local file(s).

Why: a resume reuses a flight's commit only when the models that made it are the models the resumed run loads
(`gpu/outputs/commit_identity.py`). A name alone does not say that: `weights/tiny-tdt.nemo` retrained, or a `.nemo`
replaced at the same path by a redeploy, keeps its name. So a model given as a local file, a folder (a pyannote
pipeline) or a `builtin:` (resolved to its files as the loaders resolve it) is identified by its name and the
sha256 of its bytes (a folder: of each file's relative path and sha256). A `builtin:` is identified by the files
the repo ships for it (`builtin.shipped_files`: its trained weights), never built or loaded for this, so a step
without models (the leftover listing, the assembly) imports no model library.

A hub name is identified by what the loaders would load, read from the local caches without any network:
- a Hugging Face name (`nvidia/parakeet-tdt-0.6b-v2`, `pyannote/speaker-diarization-community-1`): the commit the
  hub client's cache resolved it to (`models--{org}--{name}/refs/main` under `HF_HUB_CACHE`, the snapshot NeMo's
  `try_to_load_from_cache` and pyannote's `from_pretrained` load offline), so a model updated on the hub and
  fetched again (`batch-assets models fetch`) is another identity;
- an NGC name (`langid_ambernet`): the sha256 of the `.nemo` NeMo cached for it (`NEMO_CACHE_DIR`, else
  `~/.cache/torch/NeMo/NeMo_{version}/{name}/*/{name}.nemo`).
Not cached, its name stands alone (the step that loads it then fetches the hub's newest). A production-shaped builtin
(built in memory from code and a seed) and an untrained builtin have no file to read either: the code digest in the
record (`gpu/outputs/commit_identity.py`) covers the code that builds them.

Checksums are computed once per process and file (keyed by path, size and modification time): a 2.5 GB `.nemo`
costs about 2 s to hash on a local disk, in every step that judges commits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib

from batch_assets.models import builtin, production_shaped
from batch_assets.models.names import is_builtin

_DIGESTS: dict[tuple[str, int, int], str] = {}
CHUNK = 8 << 20


@dataclasses.dataclass(frozen=True)
class ModelIdentity:
    name: str  # as configured: a hub name, a path or a builtin
    sha256: str | None = None  # of its local file or folder (an NGC name: its cached .nemo); None: nothing to read
    revision: str | None = None  # a Hugging Face name: the commit its local hub cache resolved it to

    def text(self) -> str:
        if self.revision is not None:
            return f"{self.name} (revision {self.revision[:12]})"
        return self.name if self.sha256 is None else f"{self.name} (sha256 {self.sha256[:12]})"


def file_sha256(path: pathlib.Path) -> str:
    """The sha256 of a file's bytes, once per process while its size and modification time stay the same."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def files_sha256(root: pathlib.Path, files: list[pathlib.Path]) -> str:
    """One digest of several files: of each one's path relative to `root` and its sha256, in sorted order."""
    lines = [f"{p.relative_to(root).as_posix()} {file_sha256(p)}" for p in sorted(files)]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def local_sha256(name: str) -> str | None:
    """The checksum of a model's local files (a file: its sha256, as `sha256sum` prints it); None without any."""
    if name in production_shaped.SHAPED_ASR or name == production_shaped.COMMUNITY1_SHAPED:
        return None  # built from code and a seed (the community-1-shaped folder is a cache of that build)
    if is_builtin(name):
        shipped = builtin.shipped_files(name)
        return files_sha256(builtin.WEIGHTS_DIR, shipped) if shipped else None
    path = pathlib.Path(name).expanduser()
    if path.is_file():
        return file_sha256(path)
    if path.is_dir():
        return files_sha256(path, [p for p in path.rglob("*") if p.is_file()])
    if "/" not in name and (cached := ngc_cached_file(name)) is not None:
        return file_sha256(cached)
    return None  # a hub name not cached here: the loaders fetch it by name


def hub_revision(name: str) -> str | None:
    """The commit the local Hugging Face cache resolved `org/name` to (its `refs/main`, whose snapshot is there), read
    offline; None for any other name or one not cached."""
    if name.count("/") != 1 or pathlib.Path(name).expanduser().exists() or is_builtin(name):
        return None
    from huggingface_hub import constants  # the cache location as the hub client resolves it (HF_HOME, HF_HUB_CACHE)

    folder = pathlib.Path(constants.HF_HUB_CACHE) / f"models--{name.replace('/', '--')}"
    try:
        commit = (folder / "refs" / "main").read_text().strip()
    except OSError:
        return None
    return commit if commit and (folder / "snapshots" / commit).is_dir() else None


def ngc_cached_file(name: str) -> pathlib.Path | None:
    """The `.nemo` NeMo cached for an NGC model name (`langid_ambernet`), newest first; None when not cached."""
    import importlib.metadata
    import os

    try:
        version = importlib.metadata.version("nemo_toolkit")
    except importlib.metadata.PackageNotFoundError:
        return None
    root = pathlib.Path(os.environ.get("NEMO_CACHE_DIR") or f"~/.cache/torch/NeMo/NeMo_{version}").expanduser()
    found = sorted((root / name).glob(f"*/{name}.nemo"), key=lambda p: p.stat().st_mtime, reverse=True)
    return found[0] if found else None


def model_identity(name: str) -> ModelIdentity:
    return ModelIdentity(name, local_sha256(name), hub_revision(name))
