"""What names a model in a flight's commit record: its name or path, and a checksum of its local file(s).

Why: a resume reuses a flight's commit only when the models that made it are the models the resumed run loads
(`gpu/outputs/commit_identity.py`). A name alone does not say that: `weights/tiny-tdt.nemo` retrained, or a `.nemo`
replaced at the same path by a redeploy, keeps its name. So a model given as a local file, a folder (a pyannote
pipeline) or a `builtin:` (resolved to its files as the loaders resolve it) is identified by its name and the
sha256 of its bytes (a folder: of each file's relative path and sha256). A `builtin:` is identified by the files
the repo ships for it (`builtin.shipped_files`: its trained weights), never built or loaded for this, so a step
without models (the leftover listing, the assembly) imports no model library. A hub name
(`nvidia/parakeet-tdt-0.6b-v2`, `langid_ambernet`), a production-shaped builtin (built in memory from code and a
seed) and an untrained builtin have no file to read: their name stands alone, and the package's code digest in the
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
    sha256: str | None = None  # of its local file or folder; None: a hub name, or a model built in memory

    def text(self) -> str:
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
    return None  # a hub name: the loaders fetch it by name


def model_identity(name: str) -> ModelIdentity:
    return ModelIdentity(name, local_sha256(name))
