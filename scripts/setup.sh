#!/usr/bin/env bash
# Set up a project-local virtual environment in .venv (idempotent).
#
# torch is installed explicitly as torch==2.13.0 when it is missing, so pip never resolves a
# bare "torch" to the multi-GB CUDA default; an installed torch (2.11-2.13) is kept as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PY=.venv/bin/python

if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.13.0"
fi

# Re-install the project only when its metadata changed since the last run.
stamp=.venv/.autofunc-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || ! "$PY" -c "import autofunc.kernels" 2>/dev/null; then
  "$PY" -m pip install -q -e ".[test,bench,triton]"
  echo "$want" > "$stamp"
fi
# AUTOFUNC_SETUP_VLLM=1 (CI sets it) adds the [vllm] extra: vLLM's CPU build, which pins
# torch 2.13.0+cpu. Its torchvision, torchaudio and torchcodec do not load against that torch
# and break `import vllm`'s attention module, so they go.
if [ "${AUTOFUNC_SETUP_VLLM:-0}" = "1" ] && ! "$PY" -c "import vllm" 2>/dev/null; then
  "$PY" -m pip install -q -e ".[test,bench,triton,vllm]"
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$PY" -c "import torch, autofunc; print(f'autofunc ready: torch {torch.__version__}')"
