"""The findings as every front end shows them, read back as a user reads each one: the dashboard's
header and its still copy (HTML), ``%memsnap list``, ``memsnap summarize`` (text and ``--json``,
from the files alone). Issue 41 asks that they say the same on every scenario."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import memsnap_magic
from memsnap_magic.cli import main
from memsnap_magic.files import summaries

_FINDING = re.compile(r"<div class='memsnap-finding memsnap-\w+'>(.*?)</div>")


def finding_divs(page: str) -> list[str]:
    """The findings' lines in a page of HTML, as its reader sees them (tags gone, entities read)."""
    return [html.unescape(re.sub(r"<[^>]+>", "", div)) for div in _FINDING.findall(page)]


def sections(text: str) -> dict[str, list[str]]:
    """``findings (run x):`` sections of ``%memsnap list`` or ``memsnap summarize``: their lines."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        head = re.fullmatch(r"findings(?: \((.*)\))?:", line)
        if head:
            current = found.setdefault(head.group(1) or "", [])
        elif current is not None and line.startswith("  "):
            current.append(line[2:])
        else:
            current = None
    return found


def said_everywhere(session: Any, folder: Path, capsys: Any, run: str = "") -> dict[str, list[str]]:
    """What each front end says of ``run`` (one run shown: ``""``): the lines of the dashboard's
    header, its still copy, ``%memsnap list``'s text, and ``memsnap summarize FOLDER`` in text and
    JSON, read from the files only (the summaries beside them removed first)."""
    from memsnap_magic.views.dashboard import Dashboard
    from memsnap_magic.views.headline import findings_text

    board = Dashboard(session)
    if run:
        board.run.value = run
    prefix = f"{run}: " if run else ""
    mine = lambda lines: [line[len(prefix) :] for line in lines if line.startswith(prefix)]  # noqa: E731
    said = {
        "dashboard": mine(finding_divs(board.header.value)),
        "still copy": mine(finding_divs(board._still_bundle()["text/html"])),
        "list": sections(findings_text(session.intervals))[f"run {run}" if run else ""],
    }
    board.close()
    memsnap_magic.wait_for_writes()
    for path in folder.rglob("*" + summaries.SUFFIX):
        path.unlink()
    capsys.readouterr()
    assert main(["summarize", str(folder)]) == 0
    said["summarize"] = sections(capsys.readouterr().out)[f"run {run}" if run else ""]
    assert main(["summarize", "--json", str(folder)]) == 0
    records = [r for r in json.loads(capsys.readouterr().out) if not run or r["run"] == run]
    (said["summarize --json"],) = {tuple(r["findings"]) for r in records}
    said["summarize --json"] = list(said["summarize --json"])
    return said
