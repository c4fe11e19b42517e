"""Execute a notebook in a real Jupyter kernel (nbclient) and save the executed copy.

usage: python scripts/run_notebook.py NOTEBOOK [--out EXECUTED] [--cwd DIR]

The kernel runs in the output's folder (so snapshots land beside it), with the repository on
PYTHONPATH-equivalent through the editable install. Prints each cell's text output; exits 1 if a
cell fails (cells tagged ``raises-exception`` may fail by design).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--out", type=Path, help="where to save the executed notebook")
    parser.add_argument("--cwd", type=Path, help="kernel working directory (default: --out's folder)")
    parser.add_argument("--timeout", type=int, default=300)
    args = parser.parse_args(argv)
    out = args.out or args.notebook
    cwd = args.cwd or out.parent
    cwd.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(args.notebook, as_version=4)
    client = NotebookClient(nb, timeout=args.timeout, kernel_name="python3")
    try:
        client.execute(cwd=str(cwd))
        status = 0
    except CellExecutionError as e:
        print(f"error: a cell failed in {args.notebook}:\n{e}", file=sys.stderr)
        status = 1
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream" and o.get("name") == "stdout":
                print(o["text"], end="")
    print(f"\nexecuted notebook: {out}\nfiles written under: {cwd}")
    return status


if __name__ == "__main__":
    sys.exit(main())
