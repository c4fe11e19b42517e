"""The package's layers, as contracts: no folder imports one above it (docs/architecture.md).

Every module is parsed, and every import of ours in it is checked: at the top, inside functions,
under ``TYPE_CHECKING``, relative or absolute. A failure names the file, the line and the import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import memsnap_magic

PACKAGE = Path(memsnap_magic.__file__).parent
# lowest first: a folder may import its own and those before it, never one after it
LAYERS = ("core", "files", "results", "recording", "views", "front ends")
FRONT_ENDS = ("ipython", "cli", "integrations", "pytest_plugin")  # side by side at the top: none imports another
FACADE = ("memsnap_magic", "memsnap_magic.__main__")  # the package's own names and `python -m`


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["memsnap_magic", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _folder(module: str) -> str:
    """The first folder below the package (``memsnap_magic.files.layout``: ``files``)."""
    return module.split(".")[1] if module.count(".") else ""


def _layer(module: str) -> int:
    folder = _folder(module)
    return LAYERS.index("front ends") if folder in FRONT_ENDS else LAYERS.index(folder)


def _imports(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, module of ours) of every import in ``module``, wherever it stands."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "memsnap_magic"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "memsnap_magic":
                continue
            # `from . import options`: the submodule is what is imported
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            found += [(node.lineno, sub) for sub in subs] or [(node.lineno, target)]
    return sorted(found)


def test_every_module_lies_in_a_layer():
    for module in MODULES:
        assert module in FACADE or _folder(module) in (*LAYERS, *FRONT_ENDS), f"{module}: in no layer"


def test_no_folder_imports_one_above_it():
    wrong = []
    for module, path in MODULES.items():
        if module in FACADE:
            continue
        for line, target in _imports(module, path):
            here, there = _folder(module), _folder(target)
            upward = target in FACADE or _layer(target) > _layer(module)
            sideways = here != there and {here, there} <= set(FRONT_ENDS)
            if upward or sideways:
                allowed = ", ".join(LAYERS[: _layer(module) + 1])
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} ({here} imports {allowed})")
    assert wrong == []


def test_the_layers_test_sees_imports_inside_functions(tmp_path):
    # a contract that missed the imports inside functions would miss most of what reached up before
    source = "def f():\n    from ..recording.process_state import STATE\n\nfrom . import layout\n"
    path = tmp_path / "__init__.py"
    path.write_text(source)
    assert _imports("memsnap_magic.files", path) == [
        (2, "memsnap_magic.recording.process_state"),
        (4, "memsnap_magic.files.layout"),
    ]
