#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the demo notebook in a real Jupyter kernel on the CPU.
# The executed copy goes to demo-out/demo.ipynb and the snapshots to demo-out/memsnap/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rm -rf demo-out/memsnap  # each run's files only: the notebook and the README's picture read the folder
.venv/bin/python scripts/run_notebook.py notebooks/demo.ipynb --out demo-out/demo.ipynb
