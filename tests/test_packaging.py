"""The package as an index shows it: license, type marker, and a README whose links work there."""

from __future__ import annotations

import importlib
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
PAGES = ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))]
PACKAGE = ROOT / "memsnap_magic"
LAYERS = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())  # core, files, ...


def page_path(page: str) -> Path:
    """A page of ``PAGES``: the README at the top, the others in docs/."""
    return ROOT / page if page == "README.md" else ROOT / "docs" / page


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


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_of_the_readme_and_docs_resolve(page):
    # the README stays short by linking into docs/: every such link names a file and a section there
    path = page_path(page)
    for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
        if target.startswith(("https://", "http://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{page}: {target}"
        if anchor:
            assert anchor in headings(linked), f"{page}: {target}"


# Files the pages name only as examples of what one would add, or that a run makes
NOT_IN_THE_TREE = {"recording/backends/mps.py", "demo-out/demo.ipynb"}


@pytest.mark.parametrize("page", PAGES)
def test_files_the_readme_and_docs_name_exist(page):
    # a module moved leaves its old path in the prose: the map of the code must follow it
    path = page_path(page)
    named = set(re.findall(r"`([\w./-]+\.(?:py|sh|ipynb|toml))`", path.read_text())) - NOT_IN_THE_TREE
    roots = [
        ROOT,
        PACKAGE,
        *(PACKAGE / layer for layer in LAYERS),
        ROOT / "benchmarks",
        ROOT / "tests",
        ROOT / "scripts",
    ]
    missing = [name for name in sorted(named) if not any((root / name).exists() for root in roots)]
    assert not missing, f"{page} names files that are not there: {missing}"


@pytest.mark.parametrize("page", PAGES)
def test_modules_the_readme_and_docs_name_exist(page):
    # `files.pending`, `results.analysis.summarize`: a module or name the prose points a reader to
    path = page_path(page)
    named = set(re.findall(rf"`(?:memsnap_magic\.)?((?:{'|'.join(LAYERS)})\.[\w.]+)`", path.read_text()))
    absent = object()
    missing = []
    for name in sorted(named):
        parts = f"memsnap_magic.{name}".split(".")
        for i in range(len(parts), 1, -1):  # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                obj = getattr(obj, attr, absent)
            if obj is absent:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert not missing, f"{page} names modules or names that are not there: {missing}"


def test_the_reference_lists_every_option_line_command_and_subcommand():
    # the README points here for the whole list: an option or command added in the code is added here
    from memsnap_magic import cli
    from memsnap_magic.ipython.magic import COMMANDS
    from memsnap_magic.recording.options import OPTIONS

    text = page_path("reference.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    assert rows == set(OPTIONS), f"options table rows {sorted(rows)} against the options {sorted(OPTIONS)}"
    absent = [c for c in COMMANDS if f"`%memsnap {c}" not in text]
    assert not absent, f"line commands the reference does not show: {absent}"
    subcommands = [c.__name__.rsplit(".", 1)[-1] for c in cli.COMMANDS]
    absent = [c for c in subcommands if not re.search(rf"^memsnap {c} ", text, re.M)]
    assert not absent, f"memsnap subcommands the reference does not show: {absent}"
