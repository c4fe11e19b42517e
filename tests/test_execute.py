"""How a ``%%memsnap`` body runs: IPython's own rules, on every IPython the package supports."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsnap_magic.ipython.execute import ends_with_semicolon

FRAGMENTS = ["x", ";", " ", "\n", "# c;\n", "f(", ")", "'a;'", "if x:\n    ", "y", "1", ",", "\\\n"]


@given(st.lists(st.sampled_from(FRAGMENTS), max_size=8))
def test_trailing_semicolon_rule_is_ipythons(parts):
    from IPython.core.displayhook import DisplayHook

    reference = getattr(DisplayHook, "semicolon_at_end_of_expression", None)
    if reference is None:
        pytest.skip("this IPython has no helper to compare with (it appeared in 8.10)")
    code = "".join(parts)
    try:
        expected = bool(reference(code))
    except Exception:  # IPython's helper raises on code that does not tokenize; ours says False
        expected = False
    assert ends_with_semicolon(code) is expected


@pytest.mark.parametrize(
    "code, quiet",
    [("x;", True), ("x", False), ("x;  # c\n\n", True), ("'a;'", False), ("f(\n1);", True), ("if x:\n    y;\n", False)],
)
def test_trailing_semicolon_examples(code, quiet):
    assert ends_with_semicolon(code) is quiet


BODIES = [
    "1\nx = 2\n'three'\nx",
    "y = 4",
    "z: int = 5",
    "w = 1\nw += 6",
    "print('p')\n7",
    "a = b = 8",
    "pass",
    "# only a comment",
    "for i in range(2):\n    i",  # single mode shows values inside a for, an if, a with
    "9\nif True:\n    'in if'",
    "with open(__import__('os').devnull):\n    'in with'",
    "1\n2;",  # a trailing ';' hides every value
    "for i in range(2):\n    i\n3;",
]


@pytest.mark.parametrize("mode", ["last_expr", "all", "last", "none", "last_expr_or_assign"])
def test_the_values_shown_are_a_plain_cells_under_every_interactivity(shell, capsys, mode):
    import re

    shell.ast_node_interactivity = mode
    shell.run_line_magic("memsnap", "config device=cpu")

    def shown(cell: str) -> list[str]:
        capsys.readouterr()
        assert shell.run_cell(cell, store_history=True).success  # IPython reads ';' from the history
        out = capsys.readouterr().out
        return [re.sub(r"Out\[\d+\]", "Out[N]", line) for line in out.splitlines() if not line.startswith("memsnap ")]

    for body in BODIES:
        plain = shown(body)
        assert shown("%%memsnap\n" + body) == plain, body
    if mode == "all":  # each expression, as it runs
        assert shown("%%memsnap\n" + BODIES[0]) == ["Out[N]: 1", "Out[N]: 'three'", "Out[N]: 2"]
