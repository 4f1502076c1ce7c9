#!/usr/bin/env bash
# One install path for every machine: a virtualenv at $VENV (default .venv) with the pinned stack.
#
# Why torch first: nemo and pyannote depend on torch with loose ranges; installing torch==2.13.0 on its own
# first (the CPU wheel on a CPU machine, the CUDA wheel where `nvidia-smi` answers) and constraining it
# afterwards means no dependency resolution can ever swap it for another build.
#
# Why the antlr step: Dagster's selection grammar needs the ANTLR 4.13 runtime, NeMo's omegaconf/hydra pin 4.9;
# scripts/fix_antlr.py installs omegaconf 2.4.0 (no ANTLR) and runtime 4.13.2 and regenerates hydra's grammar.
#
# Why the torchaudio step: PyPI's torchaudio 2.11.x is a CUDA build. Beside a CPU torch its native
# libraries fail to load, yet nemo and pyannote import torchaudio at top level and need only its pure
# Python parts. On a CPU torch (and only there) we remove those native libraries, after checking that
# they really fail to load, so torchaudio imports as pure Python. A GPU install is left untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3

stamp="$VENV/.installed"
want=$(cat pyproject.toml scripts/install.sh scripts/constraints.txt | sha256sum | cut -c1-16)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi

start=$(date +%s)
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip setuptools wheel 2>&1 | grep -v "is ignored: it is neither" || true

# System tools the project uses when they are missing: espeak-ng synthesises the sample and training speech
# (only needed to regenerate them; the sample data ships in the repo). Best effort: never fatal.
if ! command -v espeak-ng >/dev/null && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null) \
    || echo "install.sh: espeak-ng not installed (only needed to regenerate sample/training speech)" >&2
fi

# PostgreSQL's server binaries: the deployed-configuration tests start a real server of their own on loopback
# (tests/servers.py). Best effort, as above; without them those tests fail saying how to install them.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
    || echo "install.sh: postgresql not installed (needed by tests/test_deployed.py)" >&2
fi

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  torch_spec="torch==2.13.0"          # CUDA wheel from the index
else
  torch_spec="torch==2.13.0"          # resolves to the local CPU wheel (find-links) on these machines
  if ls /opt/wheels/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
    torch_spec=$(ls /opt/wheels/torch-2.13.0+cpu-*.whl | head -1)
  else
    "${pip[@]}" install -q --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0" || true
  fi
fi
"${pip[@]}" install -q "$torch_spec" 2>&1 | grep -v "is ignored: it is neither" || true
"$VENV/bin/python" -W ignore -c "import torch" 2>/dev/null || { echo "install.sh: torch did not install" >&2; exit 1; }

# Constrain torch to the build just installed, plus the measured versions of everything else.
torch_version=$("$VENV/bin/python" -c "import torch; print(torch.__version__)")
cons=$(mktemp)
{ echo "torch==$torch_version"; cat scripts/constraints.txt; } >"$cons"
log="$VENV/install.log"
if ! "${pip[@]}" install -q -c "$cons" -e ".[dev]" >"$log" 2>&1; then
  grep -v "is ignored: it is neither" "$log" >&2; echo "install.sh: pip install failed (full log: $log)" >&2; exit 1
fi
rm -f "$cons"

"$VENV/bin/python" scripts/fix_torchaudio.py
"$VENV/bin/python" scripts/fix_antlr.py   # one ANTLR runtime (4.13.2) for Dagster's selections and NeMo's hydra

"$VENV/bin/python" - <<'PY'
import importlib, torch
for name in ("torchaudio", "soundfile", "polars", "dagster", "s3fs"):
    importlib.import_module(name)
print(f"install.sh: torch {torch.__version__} (cuda={torch.version.cuda}) ready")
PY
echo "$want" >"$stamp"
echo "install.sh: done in $(( $(date +%s) - start )) s; venv $(du -sh "$VENV" | cut -f1)"
