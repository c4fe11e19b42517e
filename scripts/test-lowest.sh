#!/usr/bin/env bash
# Run the test suite against the lowest versions pyproject.toml claims, in .venv-lowest.
# Each runtime dependency "name>=X" is installed as "name==X". torch is the exception: the lowest
# CPU build this project's machines can install is TORCH_VERSION (default 2.13.0; torch 2.1 exists
# only as a multi-GB CUDA build on the package index), so that is the floor tested here.
# Extra arguments go to pytest. The layers' contracts run here too (tests/test_layers.py parses
# the source); mypy does not: types are checked once, against the stubs scripts/test.sh installs
# (numpy 1.23's would report its own differences, not ours).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-lowest
LOWEST=$("$PY" - <<'PY'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
pins = [re.sub(r">=", "==", d) for d in deps if not d.startswith("torch")]
print(" ".join(pins))
PY
)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==${TORCH_VERSION:-2.13.0}"
# shellcheck disable=SC2086  # the pins are separate words
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[test]" $LOWEST
echo "lowest versions: torch==${TORCH_VERSION:-2.13.0} $LOWEST"
"$VENV/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | grep -iE "^(ipyevents|ipython|ipywidgets|matplotlib|numpy|tqdm|torch) " || true
export MPLBACKEND=Agg
"$VENV/bin/python" -m pytest "$@"
