#!/usr/bin/env bash
# Create .venv with the CPU build of torch and memsnap_magic (editable) plus its test extra.
# torch is pinned here only: the package itself asks for torch>=2.1, so users keep their own
# CUDA/ROCm/XPU build. Re-running is cheap: an existing .venv is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
