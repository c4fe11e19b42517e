#!/usr/bin/env bash
# Set up (scripts/setup.sh), lint (ruff check and ruff format --check), and run the whole test
# suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
export MPLBACKEND=Agg
.venv/bin/python -m pytest "$@"
