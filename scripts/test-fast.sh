#!/usr/bin/env bash
# The inner loop: set up (scripts/setup.sh), ruff, then every test but the slow ones (see
# docs/developing.md). Extra arguments go to pytest. CI runs scripts/test.sh, which runs them all.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
export MPLBACKEND=Agg
.venv/bin/python -m pytest -m "not slow" "$@"
