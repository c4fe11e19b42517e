"""Run a cell body the way IPython runs a cell, so wrapping it in ``%%memsnap`` changes nothing.

The body goes through IPython's input transforms (magics, ``!cmd``), its AST transformers and its
compiler (``from __future__`` flags), in the user's namespace. It is registered in the line cache
under a cell filename with the magic's line in front, so tracebacks read ``Cell In[N], line L``
with the cell's own line numbers. Exceptions propagate unchanged: the outer cell shows one normal
traceback and counts as failed, exactly as without the magic. A final expression's value is
returned, and IPython displays it as the cell's ``Out[N]``; the shell's ``ast_node_interactivity``
decides which values are shown, as for any cell (``all``: each expression's as it runs).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import io
import sys
import tokenize
import traceback
from typing import Any, Callable

from IPython.core.error import UsageError


class CellCode:
    """A ``%%memsnap`` body compiled as IPython compiles a cell; ``run()`` executes it.

    Compiling comes first, so a syntax error is raised before anything is recorded, as a cell
    with a syntax error never runs.
    """

    def __init__(self, shell: Any, header: str, body: str) -> None:
        self.shell = shell
        # read now, before recording starts: on the CPU route every call while it records is traced
        self._namespaces = shell.user_global_ns, shell.user_ns
        transformed = shell.transform_cell(body)
        # Line 1 is the magic's line, as a comment: the cell's own line numbers hold, and the
        # cached source parses, as a plain cell's does (tracebacks read it for their variables
        # and highlights, the Verbose mode's local values, every later call into its functions).
        self.filename = shell.compile.cache(
            "# " + header + "\n" + transformed, cell_number(shell), raw_code=header + "\n" + body
        )
        # IPython checks for a trailing ';' on the outer cell's code, a run_cell_magic(...) call.
        self._quiet = ends_with_semicolon(transformed)
        try:
            tree = shell.transform_ast(shell.compile.ast_parse("\n" + transformed, filename=self.filename))
            self._execs, self._eval = self._compile(list(tree.body) if tree is not None else [])
        except SyntaxError as e:
            if _awaits_at_top_level("\n" + transformed):
                raise UsageError(
                    "%%memsnap: this cell uses await at its top level, which a cell magic cannot run (it runs "
                    "synchronously inside the kernel's event loop); record it from a plain cell instead: "
                    "async with memsnap_magic.Recorder(step=N): await ..."
                ) from None
            # IPython prints a plain SyntaxError's full call stack when it comes from running
            # code; a subclass goes through _render_traceback_ and reads like a cell's error.
            error = e if type(e) is not SyntaxError else _BodySyntaxError(*e.args)
            _render_from_cell(shell, error, self.filename)
            raise error from None

    def _compile(self, nodes: list[ast.stmt]) -> tuple[list[Any], Any]:
        """Code to exec, and the expression whose value the cell returns (None: no value), as
        IPython's ``run_ast_nodes`` splits a cell for the shell's ``ast_node_interactivity``."""
        mode = getattr(self.shell, "ast_node_interactivity", "last_expr")
        if mode == "last_expr_or_assign" and nodes:  # ``x = f()`` last shows x, as IPython does
            last = nodes[-1]
            target = (
                last.targets[0]
                if isinstance(last, ast.Assign) and len(last.targets) == 1
                else getattr(last, "target", None)
                if isinstance(last, (ast.AugAssign, ast.AnnAssign))
                else None
            )
            if isinstance(target, ast.Name):
                nodes.append(
                    ast.fix_missing_locations(ast.copy_location(ast.Expr(ast.Name(target.id, ast.Load())), last))
                )
        compile_ = self.shell.compile

        def single(node: ast.stmt) -> Any:  # the values of its expressions shown, even inside a for or with
            return compile_(ast.Interactive([node]), self.filename, "single")

        if self._quiet:  # a trailing ';' hides every value the cell would show
            mode = "none"
        if mode == "all":  # one node at a time, each in single mode: values shown as they come
            return [single(n) for n in nodes], None
        # last: the last node shows its values, whatever it is; last_expr: only an expression does
        last_expr = bool(nodes) and isinstance(nodes[-1], ast.Expr) and mode != "none"
        shown = nodes.pop() if nodes and (mode == "last" or last_expr) else None
        # one statement at a time, as IPython compiles a cell: a `from __future__` import after
        # other statements compiles (and holds for the statements after it, as in a plain cell)
        execs = [compile_(ast.Module([node], []), self.filename, "exec") for node in nodes]
        if shown is None:
            return execs, None
        if isinstance(shown, ast.Expr):  # its value is the cell's, displayed by IPython as Out[N]
            return execs, compile_(ast.Expression(shown.value), self.filename, "eval")
        return [*execs, single(shown)], None  # "last": a for or with shows the values inside

    def run(self) -> Any:
        """Execute in the user's namespace; the final expression's value is returned."""
        __tracebackhide__ = True
        glob, local = self._namespaces
        try:
            for code in self._execs:
                exec(code, glob, local)
            value = eval(self._eval, glob, local) if self._eval is not None else None
            return None if self._quiet else value
        except BaseException as e:
            codes = (*self._execs, *((self._eval,) if self._eval is not None else ()))
            _render_from_cell(self.shell, e, self.filename, codes)
            _OuterFrames.drop_when_shown(self.shell, codes)
            drop_own_frame(e)
            raise


def cell_number(shell: Any) -> int:
    """The running cell's ``In[N]``. IPython 9 counts a cell before running it, 8 after, so
    ``shell.execution_count`` is off by one on 9; the running cell's result holds its number."""
    running = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    number = getattr(running, "execution_count", None)
    return number if type(number) is int else shell.execution_count


def _awaits_at_top_level(source: str) -> bool:
    try:
        code = compile(source, "<memsnap-await>", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        return False
    return bool(code.co_flags & inspect.CO_COROUTINE)


def ends_with_semicolon(code: str) -> bool:
    """Whether a cell's last token is ``;``, IPython's rule for not displaying its value (the
    rule of every IPython 8 and 9; its own helper for it only appeared in 8.10)."""
    if ";" not in code:  # no token to find: most cells are spared the tokenizer
        return False
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    for token in reversed(tokens):
        if token.type not in (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            return token.type == tokenize.OP and token.string == ";"
    return False


class SyntaxCheck:
    """Input transformer: a ``%%memsnap`` cell whose body does not compile is handed to IPython as
    the body alone, so IPython reports the SyntaxError exactly as for an ordinary cell (and
    nothing is recorded). Registered in ``input_transformers_cleanup`` by ``%load_ext``.
    """

    def __init__(self, shell: Any) -> None:
        self.shell = shell

    def __call__(self, lines: list[str]) -> list[str]:
        if not lines or not lines[0].lstrip().startswith("%%memsnap"):
            return lines
        body = "".join(lines[1:])
        try:
            source = "\n" + self.shell.transform_cell(body)
            # compiled, not only parsed: `return`, `yield`, `break` or `nonlocal` at the top level
            # parse but fail to compile, and IPython must report them as a cell's, not from our frames;
            # a statement at a time, as IPython compiles a cell (a late `from __future__` import compiles)
            flags = self.shell.compile.flags
            for node in compile(source, "<memsnap-check>", "exec", flags | ast.PyCF_ONLY_AST, True).body:
                compile(ast.Module([node], []), "<memsnap-check>", "exec", flags, True)
        except _NOT_COMPILED as e:
            if isinstance(e, SyntaxError) and _awaits_at_top_level(source):  # the magic says what to do instead
                return lines
            return ["\n", *lines[1:]]
        except Exception:  # any other trouble: leave the cell to the magic
            return lines
        return lines


# What IPython reports as a cell that does not compile (run_cell's own list): a body nested too
# deep for the parser raises MemoryError, one with null bytes ValueError
_NOT_COMPILED = (SyntaxError, OverflowError, ValueError, TypeError, MemoryError)


class _BodySyntaxError(SyntaxError):
    """A syntax error in a ``%%memsnap`` body (shown and named exactly like ``SyntaxError``)."""


_BodySyntaxError.__name__ = _BodySyntaxError.__qualname__ = "SyntaxError"


def drop_own_frame(exc: BaseException) -> None:
    """Take the calling frame (ours, re-raising ``exc`` with a bare ``raise``) off ``exc``'s
    traceback: a bare ``raise`` does not add it back, so ``sys.last_traceback``, ``%debug`` and
    the exception groups IPython prints with the standard library never show it."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None and tb.tb_frame is sys._getframe(1):
        BaseException.with_traceback(exc, tb.tb_next)  # not through a __setattr__ of the exception's


class _CellTraceback:
    """``_render_traceback_`` for the traceback the cell raised: from the cell's first frame on.

    IPython renders an exception through its ``_render_traceback_`` when it has one; this keeps
    the outer ``run_cell_magic(...)`` line and IPython's frames out of what the user reads, in the
    cell's output and in ``%tb`` after it. The same exception raised again later (a new traceback)
    renders as any other.
    """

    def __init__(self, shell: Any, filename: str, owner: BaseException, codes: tuple[Any, ...] = ()) -> None:
        self.shell, self.filename, self.owner, self.codes = shell, filename, owner, codes
        self.shown: Any = None  # the traceback this renders, fixed on the first call

    def __call__(self) -> list[str]:
        value = self.owner
        # a shallow copy shares this attribute: the one being shown is the exception IPython
        # handles now (or stored last, by versions that store it first), if it shares it
        for shown in (sys.exc_info()[1], getattr(sys, "last_value", None)):
            if (
                shown is not None
                and shown is not value
                and getattr(shown, "__dict__", {}).get("_render_traceback_") is self
            ):
                return self.shell.InteractiveTB.structured_traceback(type(shown), shown, shown.__traceback__)
        if self.shown is None:
            self.shown = value.__traceback__
        elif value.__traceback__ is not self.shown:
            with contextlib.suppress(AttributeError):
                object.__delattr__(value, "_render_traceback_")
            return self.shell.InteractiveTB.structured_traceback(type(value), value, value.__traceback__)
        if isinstance(value, SyntaxError):
            return self.shell.SyntaxTB.structured_traceback(type(value), value, [])
        tb = self._first(lambda code: code in self.codes) or self._first(lambda code: code.co_filename == self.filename)
        return self.shell.InteractiveTB.structured_traceback(
            type(value), value, tb if tb is not None else value.__traceback__, tb_offset=0
        )

    def __reduce__(self) -> str | tuple[Any, ...]:
        # the exception pickled (kept, sent to another process) carries no shell, nothing of
        # ours to import: there it renders as the standard library formats it
        return _formatted(self.owner).__reduce__()

    def __deepcopy__(self, memo: dict[int, Any]) -> functools.partial[list[str]]:
        return _formatted(memo.get(id(self.owner), self.owner))

    def _first(self, found: Callable[[Any], bool]) -> Any:
        """The traceback from the first frame whose code is ``found``: the body's own code
        objects first, as ipykernel names a cell's file by its text, and a body ending in a
        newline has the outer cell's text, file name and all."""
        tb = self.owner.__traceback__
        while tb is not None and not found(tb.tb_frame.f_code):
            tb = tb.tb_next
        return tb


class _OuterFrames:
    """Takes the two frames a cell magic adds (the outer cell's ``run_cell_magic(...)`` line and
    IPython's ``run_cell_magic``) off the traceback of the exception the body raised, when IPython
    shows it: what it prints without ``_render_traceback_`` (a ``SyntaxError`` raised while running,
    as importing a module with one; exception groups), ``sys.last_traceback`` and ``%debug`` then
    hold the frames a plain cell's would. Those frames are added as the exception leaves us, so
    the chain is mended in IPython's ``showtraceback``, once: the shell's own method is wrapped
    for that call only. The exception is known by the body's code objects its traceback runs
    through, not held: one the user caught and dropped (a search for the largest batch that fits)
    is freed with its frames, and the next call disarms."""

    def __init__(self, shell: Any, codes: tuple[Any, ...]) -> None:
        self.shell, self.codes = shell, codes

    @classmethod
    def drop_when_shown(cls, shell: Any, codes: tuple[Any, ...]) -> None:
        armed = vars(shell).get("showtraceback") if hasattr(shell, "__dict__") else None
        if armed is not None and not isinstance(armed, cls):  # someone else's: left alone
            return
        with contextlib.suppress(Exception):
            shell.showtraceback = cls(shell, codes)

    def __call__(self, exc_tuple: Any = None, *args: Any, **kwargs: Any) -> Any:
        if vars(self.shell).get("showtraceback") is self:  # never a hook set over ours since
            del self.shell.showtraceback
        shown = exc_tuple[1] if exc_tuple is not None and len(exc_tuple) > 1 else sys.exc_info()[1]
        if isinstance(shown, BaseException):
            with contextlib.suppress(Exception):
                self._drop(shown)
        return type(self.shell).showtraceback(self.shell, exc_tuple, *args, **kwargs)

    def _drop(self, exc: BaseException) -> None:
        head = exc.__traceback__  # where IPython caught it (run_code)
        outer = head.tb_next if head is not None else None
        magic = outer.tb_next if outer is not None else None
        body = magic.tb_next if magic is not None else None
        if head is None or outer is None or magic is None or body is None or body.tb_frame.f_code not in self.codes:
            return  # not this body's, or not the ordinary %%memsnap cell (run from a loop, in %%time): as it is
        if outer.tb_frame.f_code.co_name == "<module>" and magic.tb_frame.f_code.co_name == "run_cell_magic":
            head.tb_next = body


def _formatted(exc: BaseException) -> functools.partial[list[str]]:
    """A pickled or copied exception's ``_render_traceback_``: ``traceback.format_exception`` of
    it, reading the traceback it has when rendered (raised again, it has a new one)."""
    if sys.version_info >= (3, 10):
        return functools.partial(traceback.format_exception, exc)
    return functools.partial(traceback.format_exception, type(exc), exc, None)


def _render_from_cell(shell: Any, exc: BaseException, filename: str, codes: tuple[Any, ...] = ()) -> None:
    own = getattr(exc, "_render_traceback_", None)
    if (own is not None and not isinstance(own, _CellTraceback)) or not hasattr(shell, "InteractiveTB"):
        return  # the exception renders itself (ipyparallel's RemoteError, for one); ours is made anew
    # set past the exception's own __setattr__, which may refuse attributes; one without an
    # instance __dict__ keeps its own traceback
    with contextlib.suppress(Exception):
        object.__setattr__(exc, "_render_traceback_", _CellTraceback(shell, filename, exc, codes))
