#!/usr/bin/env bash
# Create .venv with the CPU build of torch and memsnap_magic (editable) plus its test extra and
# the integrations' frameworks (transformers, accelerate, lightning), pinned to the versions tested.
# torch is pinned here only: the package itself asks for torch>=2.1, so users keep their own
# CUDA/ROCm/XPU build. Re-running is cheap: an existing .venv is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check "torch==${TORCH_VERSION:-2.13.0}"
# the integrations' frameworks at the versions tested (torch named again so pip never replaces it)
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,transformers,lightning]" \
  "torch==${TORCH_VERSION:-2.13.0}" "transformers==${TRANSFORMERS_VERSION:-5.25.0}" \
  "accelerate==${ACCELERATE_VERSION:-1.16.0}" "lightning==${LIGHTNING_VERSION:-2.6.6}"
