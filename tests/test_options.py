import shlex
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsnap_magic import session, wait_for_writes
from memsnap_magic.recording.options import OPTIONS, OptionError, help_text, parse, parse_given, split_line


def test_defaults_and_values():
    v = parse("step=5 out='my runs' device=cuda:1 clear=false max_entries=10 context=none")
    assert v.step == 5 and v.out == "my runs" and v.device == "cuda:1"
    assert v.clear is False and v.max_entries == 10 and v.context == "none"
    assert v.tag == "torch_memory" and v.stacks == "python"


def test_session_defaults_are_overridden_by_the_line():
    v = parse("tag=b", {"tag": "a", "max_entries": 7})
    assert v.tag == "b" and v.max_entries == 7


def test_steps_sorted_unique():
    assert parse("steps=10,1,5,5").steps == (1, 5, 10)
    assert parse_given("steps=3") == {"steps": (3,)}


@pytest.mark.parametrize(
    "line, words",
    [
        ("stpe=5", ["unknown option 'stpe'", "step, steps"]),
        ("step", ["expected key=value"]),
        ("--step 5", ["expected key=value"]),
        ("step=five", ["step=", "'five'", "an integer from 0 to"]),
        ("step=-1", ["step=", "too small", "an integer from 0 to 2,147,483,647"]),
        ("step=2147483648", ["step=", "too large", "an integer from 0 to 2,147,483,647"]),
        ("steps=1,2147483648", ["steps=", "too large"]),
        ("device=tpu", ["device=", "auto, cpu, cuda, cuda:K"]),
        ("device=cpu:1", ["device="]),
        ("context=some", ["context=", "all, alloc, state, none"]),
        ("stacks=cpp", ["stacks=", "python, all"]),
        ("clear=maybe", ["clear=", "true, false"]),
        ("max_entries=0", ["max_entries=", "an integer from 1 to"]),
        ("tag=a/b", ["tag=", "file name"]),
        ("step=1 step=2", ["given twice"]),
        ("step=1 steps=1,2", ["not both"]),
        ("steps=,", ["steps="]),
        ("out='unclosed", ["cannot split"]),
    ],
)
def test_bad_options_name_key_and_allowed_values(line, words):
    with pytest.raises(OptionError) as info:
        parse(line)
    for word in words:
        assert word in str(info.value)


def test_help_lists_every_option_with_an_example():
    text = help_text()
    for key, opt in OPTIONS.items():
        assert f"{key}=" in text and opt.example in text


@pytest.mark.parametrize("namespace", [[], "globals", 3])
def test_a_recorder_namespace_that_is_no_dict_is_a_type_error_when_made(namespace):
    from memsnap_magic import Recorder

    with pytest.raises(TypeError, match="namespace= is a mapping of names"):
        Recorder(namespace=namespace)


def test_a_recorder_takes_any_mapping_as_its_namespace(tmp_path):
    import types

    from memsnap_magic import Recorder

    class Holder:
        pass

    with Recorder(namespace=types.MappingProxyType(vars(Holder)), out=str(tmp_path), device="cpu") as rec:
        pass
    assert [iv.step for iv in rec.intervals] == [1]


def test_recorder_keywords_are_converted_directly():
    from pathlib import Path

    from memsnap_magic.recording.options import DEFAULTS, Options, from_keywords

    o = from_keywords(step=3, out=Path("runs") / "mem", steps=None, rank=None, clear=False)
    assert o == Options(step=3, out="runs/mem", clear=False)
    assert from_keywords(steps=[10, 1, 5, 5]).steps == (1, 5, 10)
    assert from_keywords(steps=range(2, 4)).steps == (2, 3)
    assert from_keywords() == DEFAULTS
    import numpy as np

    assert from_keywords(skip_actions=np.array(["oom"])).skip_actions == ("oom",)  # numpy's str_ is a str
    for bad, words in [
        ({"step": True}, "step="),
        ({"step": 1.5}, "step="),
        ({"clear": "maybe"}, "clear="),
        ({"clear": 1}, "clear="),
        ({"steps": 5}, "steps="),
        ({"device": "tpu"}, "device="),
        ({"tag": "a/b"}, "tag="),
        ({"bogus": 1}, "unknown option 'bogus'"),
        # each refused for what it is (an unhashable item was a raw TypeError; bytes, "empty path")
        ({"skip_actions": [[1]]}, "skip_actions=.*not one or more of the allowed values"),
        ({"out": b"runs"}, "out=.*a path is a str or os.PathLike, not bytes"),
        ({"out": 5}, "out=.*not int"),
        ({"out": "a\0b"}, "out=.*cannot hold a NUL character"),
    ]:
        with pytest.raises(OptionError, match=words):
            from_keywords(**bad)


def test_rules_between_options_hold_over_session_defaults():
    # a session default and the line together must not ask for both
    with pytest.raises(OptionError, match="not both"):
        parse("step=5", {"steps": (1, 2)})
    with pytest.raises(OptionError, match="clear=false"):
        parse("steps=1,2", {"clear": False})


def test_usage_line_names_every_option():
    from memsnap_magic.recording.options import usage

    text = usage()
    assert text.startswith("%%memsnap [step=N] [steps=1,5,10]")
    for key in OPTIONS:
        assert f"[{key}=" in text
    assert "device=auto|cpu|cuda|cuda:K" in text and "context=all|alloc|state|none" in text


@given(st.text(alphabet=st.sampled_from(list(" \t\r\n\x0b\x0c\xa0\u2003ab=,1$#{}'\"\\")), max_size=30))
@settings(max_examples=400, deadline=None)
def test_lines_split_as_shlex_splits_them(line):
    try:
        expected = shlex.split(line, posix=True)
    except ValueError:  # an unclosed quote: the same error either way
        with pytest.raises(ValueError):
            split_line(line)
        return
    assert split_line(line) == expected


def test_a_long_steps_list_parses_whole():
    steps = tuple(range(1, 100_001))
    assert parse("steps=" + ",".join(map(str, reversed(steps))) + " device=cpu").steps == steps


def test_a_plain_line_is_not_expanded_by_ipython(shell, monkeypatch):
    shell.run_cell("import torch")
    expanded = []
    real = shell.var_expand
    monkeypatch.setattr(shell, "var_expand", lambda *a, **k: expanded.append(a[0]) or real(*a, **k))
    steps = ",".join(map(str, range(1, 10_001)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = shell.run_cell(
            f"%%memsnap steps={steps} device=cpu\nfor s in (1, 2):\n    mark(s)\n    x = torch.ones(10)"
        )
    assert res.success and expanded == []  # IPython's expansion costs ~1 s per 1,000 steps here
    assert [iv.step for iv in session().intervals] == [1, 2]
    (said,) = [str(w.message) for w in caught if "memsnap" in str(w.message)]
    assert len(said) < 300, said  # 9,998 steps never began: named by their range, not one by one
    assert "steps 3–10000 never began" in said


@pytest.mark.parametrize(
    "call",
    [
        "{line}",  # a cell of its own
        "def f(folder='in-f', tag='t_f'):\n    return {line}\nf()",  # from a function: IPython reads its caller's names
    ],
)
def test_names_in_a_line_expand_as_ipython_expands_them(shell, tmp_path, call):
    shell.run_cell("import torch")
    seen = {}

    def probe(line, cell=None):  # IPython expands its line itself
        seen["cell" if cell is not None else "line"] = line

    shell.register_magic_function(probe, "line_cell", "probe")

    shell.user_ns.update(folder=str(tmp_path / "out"), tag="t_ns")
    for kind, line in [
        ("line", "config tag=$tag out={folder}/x"),
        ("cell", "step=1 device=cpu tag=$tag out={folder}/x"),
    ]:
        magic = "run_line_magic" if kind == "line" else "run_cell_magic"
        body = ", 'y = torch.ones(3)'" if kind == "cell" else ""
        for name in ("probe", "memsnap"):
            assert shell.run_cell(call.format(line=f"get_ipython().{magic}({name!r}, {line!r}{body})")).success
    wait_for_writes()
    assert session().defaults["tag"] + " " + session().defaults["out"] == seen["line"].replace("config ", "").replace(
        "tag=", ""
    ).replace("out=", "")
    (iv,) = session().intervals
    assert f"tag={iv.tag} out={iv.path.parent.parent}" in seen["cell"]
