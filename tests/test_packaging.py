"""The package as an index shows it: license, type marker, and a README whose links work there."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPO = "https://github.com/memsnap-magic/memsnap_magic"
RAW = "https://raw.githubusercontent.com/memsnap-magic/memsnap_magic/main/"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return zipfile.ZipFile(next(out.glob("memsnap_magic-*.whl")))


def metadata(wheel: zipfile.ZipFile):
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return Parser().parsestr(wheel.read(name).decode())


def test_wheel_ships_the_license_and_the_type_marker(wheel):
    names = wheel.namelist()
    assert "memsnap_magic/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    meta = metadata(wheel)
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert "BSD 3-Clause" in (ROOT / "LICENSE").read_text()
    assert "Typing :: Typed" in meta.get_all("Classifier")
    assert any(url.startswith("Repository, https://") for url in meta.get_all("Project-URL"))


def test_readme_links_work_on_the_package_index(wheel):
    description = metadata(wheel).get_payload()
    targets = re.findall(r"\]\(([^)]+)\)", description)
    assert targets, "the README has links"
    for target in targets:
        assert target.startswith(("https://", "http://")), target  # nothing relative is left
        if target.startswith(RAW):
            assert (ROOT / target[len(RAW) :]).is_file(), target
        elif target.startswith(f"{REPO}/blob/main/"):
            path, _, anchor = target[len(f"{REPO}/blob/main/") :].partition("#")
            assert (ROOT / path).exists(), target
            assert not anchor or anchor in headings(ROOT / path), target  # a docs page's section
        elif target.startswith(f"{REPO}#"):
            assert target.split("#", 1)[1] in headings(ROOT / "README.md"), target


def headings(page: Path) -> set[str]:
    """The anchors GitHub gives a Markdown page's headings."""
    return {
        re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    }


@pytest.mark.parametrize("page", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))])
def test_relative_links_of_the_readme_and_docs_resolve(page):
    # the README stays short by linking into docs/: every such link names a file and a section there
    path = ROOT / page if page == "README.md" else ROOT / "docs" / page
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if target.startswith(("https://", "http://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{page}: {target}"
        if anchor:
            assert anchor in headings(linked), f"{page}: {target}"
