"""The offline default models, built by the project itself and cached after the first build.

Names starting with `builtin:` resolve to local paths laid out exactly like their production
counterparts (a `.nemo` file for ASR; a pyannote pipeline folder with `config.yaml`, `segmentation/`,
`embedding/` and `plda/` for diarization), so the loaders use the same code for both. Builds are
seeded (same weights every time), keyed by a hash of everything that defines them, and made under a
file lock so concurrent steps never race.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pathlib
import shutil
import tempfile
from collections.abc import Callable

import filelock
import yaml

from batch_assets.models.languages import TINY_LANGID, TINY_TDT_DE, TINY_TDT_ES, TINY_TDT_JA
from batch_assets.models.names import TINY_DIARIZATION, TINY_TDT
from batch_assets.settings import current_settings

BUILTIN_SEED = 20260115

WEIGHTS_DIR = pathlib.Path(__file__).resolve().parent / "weights"
SEGMENTATION_WEIGHTS = WEIGHTS_DIR / "segmentation.bin"
EMBEDDING_WEIGHTS = WEIGHTS_DIR / "embedding.bin"  # trained by batch_assets.training.train_diarization
PLDA_DIR = WEIGHTS_DIR / "plda"
DIARIZATION_REPORT = WEIGHTS_DIR / "diarization.json"  # holds the tuned pipeline parameters
TDT_WEIGHTS = WEIGHTS_DIR / "tiny-tdt.nemo"  # trained by batch_assets.training.train_asr
LANGUAGE_TDT_WEIGHTS = {TINY_TDT_ES: WEIGHTS_DIR / "tiny-tdt-es.nemo",  # train_asr --language es
                        TINY_TDT_DE: WEIGHTS_DIR / "tiny-tdt-de.nemo",  # train_asr --language de
                        TINY_TDT_JA: WEIGHTS_DIR / "tiny-tdt-ja.nemo"}  # train_asr --language ja
LANGID_WEIGHTS = WEIGHTS_DIR / "tiny-langid.nemo"  # trained by batch_assets.training.train_langid

DIARIZATION_PARAMS = {
    "segmentation": {"min_duration_off": 0.0},
    "clustering": {"threshold": 0.6, "Fa": 0.07, "Fb": 0.8},
}
EMBEDDING_DIMENSION = 64


def cache_root() -> pathlib.Path:
    """Where the builtin models are built: the settings' `model_cache` (BATCH_ASSETS_MODEL_CACHE)."""
    return current_settings().model_cache


def fingerprint(*parts: object) -> str:
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, pathlib.Path):
            digest.update(part.read_bytes())
        else:
            digest.update(json.dumps(part, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:12]


def cached_build(name: str, key: str, build: Callable[[pathlib.Path], None]) -> pathlib.Path:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{name}-{key}"
    if final.exists():
        return final
    with filelock.FileLock(str(root / f"{name}.lock")):
        if final.exists():
            return final
        staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            build(staging)
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final


def tiny_tdt_path() -> pathlib.Path:
    """The trained tiny TDT shipped in the repo; before any training, a seeded random one built from config."""
    if TDT_WEIGHTS.exists():
        return TDT_WEIGHTS
    from batch_assets.models.tiny_asr import tiny_tdt_config

    def build(folder: pathlib.Path) -> None:
        from batch_assets.models.tiny_asr import build_tiny_tdt

        build_tiny_tdt(BUILTIN_SEED).save_to(str(folder / "tiny-tdt.nemo"))

    folder = cached_build("tiny-tdt", fingerprint(tiny_tdt_config(), BUILTIN_SEED), build)
    return folder / "tiny-tdt.nemo"


def language_tdt_path(name: str) -> pathlib.Path:
    """A builtin language's trained tiny TDT, shipped in the repo (no untrained stand-in: it would hear nothing)."""
    path = LANGUAGE_TDT_WEIGHTS[name]
    if not path.exists():
        raise FileNotFoundError(f"{name}: {path} is missing: train it (make train-asr-languages) or route the "
                                "language to another model (BATCH_ASSETS_ASR_MODELS)")
    return path


def tiny_langid_path() -> pathlib.Path:
    """The trained builtin language identification model; before any training, a seeded random one."""
    if LANGID_WEIGHTS.exists():
        return LANGID_WEIGHTS
    from batch_assets.models.langid_config import LANGID_SEED, build_langid, builtin_config

    def build(folder: pathlib.Path) -> None:
        build_langid(builtin_config(), LANGID_SEED).save_to(str(folder / "tiny-langid.nemo"))

    return cached_build("tiny-langid", fingerprint(builtin_config(), LANGID_SEED), build) / "tiny-langid.nemo"


def tiny_diarization_path() -> pathlib.Path:
    from batch_assets.models import tiny_segmentation

    def build(folder: pathlib.Path) -> None:
        import torch

        from batch_assets.models.tiny_embedding import TinyXVector
        from batch_assets.models.tiny_plda import write_plda

        copy_segmentation(folder)
        if EMBEDDING_WEIGHTS.exists() and PLDA_DIR.exists():  # trained: the shipped default
            (folder / "embedding").mkdir()
            shutil.copyfile(EMBEDDING_WEIGHTS, folder / "embedding" / "pytorch_model.bin")
            shutil.copytree(PLDA_DIR, folder / "plda")
        else:  # before any training: seeded random embeddings and a neutral PLDA
            torch.manual_seed(BUILTIN_SEED)
            save_embedding(TinyXVector(dimension=EMBEDDING_DIMENSION), folder, duration=3.0)
            write_plda(folder / "plda", EMBEDDING_DIMENSION)
        write_pipeline_config(folder, diarization_params())

    trained = [p for p in (EMBEDDING_WEIGHTS, PLDA_DIR / "plda.npz", PLDA_DIR / "xvec_transform.npz",
                           DIARIZATION_REPORT) if p.exists()]
    key = fingerprint(
        SEGMENTATION_WEIGHTS,
        *trained,
        tiny_segmentation.ARCHITECTURE,
        diarization_params(),
        EMBEDDING_DIMENSION,
        BUILTIN_SEED,
        "embedding-v1",
    )
    return cached_build("tiny-diarization", key, build)


def copy_segmentation(folder: pathlib.Path) -> None:
    """The shipped (trained) tiny segmentation model into a pipeline folder's `segmentation/`."""
    (folder / "segmentation").mkdir()
    shutil.copyfile(SEGMENTATION_WEIGHTS, folder / "segmentation" / "pytorch_model.bin")


def save_embedding(model, folder: pathlib.Path, duration: float) -> None:
    """An embedding model (in eval mode) as a pipeline folder's `embedding/` checkpoint, with its specification."""
    from pyannote.audio.core.task import Problem, Resolution, Specifications

    from batch_assets.models.pyannote_checkpoint import save_checkpoint

    model.eval()
    model.specifications = Specifications(problem=Problem.REPRESENTATION, resolution=Resolution.CHUNK,
                                          duration=duration, min_duration=0.5)
    save_checkpoint(model, folder / "embedding" / "pytorch_model.bin")


def write_pipeline_config(folder: pathlib.Path, params: dict, **pipeline_params: object) -> None:
    """A pipeline folder's `config.yaml`: pyannote's SpeakerDiarization over the folder's segmentation, embedding and
    PLDA, VBx clustering, 10 segmentation steps per chunk, overlap-free embeddings; `params` instantiate it."""
    config = {
        "pipeline": {
            "name": "pyannote.audio.pipelines.SpeakerDiarization",
            "params": {
                "segmentation": "$model/segmentation",
                "embedding": "$model/embedding",
                "plda": "$model/plda",
                "clustering": "VBxClustering",
                "segmentation_step": 0.1,
                "embedding_exclude_overlap": True,
            } | pipeline_params,
        },
        "params": params,
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def diarization_params() -> dict:
    if DIARIZATION_REPORT.exists():
        return json.loads(DIARIZATION_REPORT.read_text())["params"]
    return DIARIZATION_PARAMS


def shipped_files(name: str) -> list[pathlib.Path]:
    """The files in the repo a builtin is made from (its trained weights; none before training), without building
    it or importing a model library: what identifies it in a flight's commit (`models/identity.py`)."""
    files = {TINY_TDT: [TDT_WEIGHTS], TINY_LANGID: [LANGID_WEIGHTS],
             TINY_DIARIZATION: [SEGMENTATION_WEIGHTS, EMBEDDING_WEIGHTS, PLDA_DIR / "plda.npz",
                                PLDA_DIR / "xvec_transform.npz", DIARIZATION_REPORT]}
    files |= {language_name: [path] for language_name, path in LANGUAGE_TDT_WEIGHTS.items()}
    if name not in files:
        raise ValueError(f"unknown builtin model {name!r}; known: {sorted(files)}")
    return [path for path in files[name] if path.exists()]


def resolve(name: str) -> pathlib.Path:
    builders = {TINY_TDT: tiny_tdt_path, TINY_DIARIZATION: tiny_diarization_path, TINY_LANGID: tiny_langid_path}
    builders |= {language_name: functools.partial(language_tdt_path, language_name)
                 for language_name in LANGUAGE_TDT_WEIGHTS}
    if name not in builders:
        raise ValueError(f"unknown builtin model {name!r}; known: {sorted(builders)}")
    return builders[name]()
