#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint (ruff check and ruff format --check), check types (mypy: strict
# for core, files and results, see pyproject.toml), and run the whole test suite, whose
# tests/test_layers.py holds the layers' import contracts. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
export MPLBACKEND=Agg
.venv/bin/python -m pytest "$@"
