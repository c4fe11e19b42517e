"""The Python stacks of CPU allocations, read from the profiler's Python tracer."""

from __future__ import annotations

from collections import deque
from itertools import compress, repeat
from typing import Any

from ....results.stacks import Kinds, user_frames

STACK_BYTES = 1024  # allocations this large or larger get their Python stack; smaller ones cost as much, matter little


class Stacks:
    """Python stacks of CPU allocations, from the profiler's Python tracer.

    The tracer records each Python call (``PyCall``: its ``def`` line as ``callsite``, the line
    that called it as ``caller``) and each C function called from Python (``PyCCall``: the line
    that called it). An allocation inside a C function (``torch.ones``, ``x.exp()``) thus gets its
    exact line; one made directly by a Python function (``x * 2`` goes through no C function
    call) gets the function's ``def`` line. Each outer frame is the line that made the call.
    Stacks are built once per tree node and frames once per distinct line within a session, and
    shared, as PyTorch shares them in its snapshots.
    """

    def __init__(self, start_frames: dict[int, list[dict[str, Any]]]) -> None:
        self.start_frames = start_frames  # blocks carried in from the last interval, with their stacks
        self.last: dict[int, tuple[int, list[dict[str, Any]]]] = {}  # address -> (size, stack) of its last alloc
        self.window: deque[tuple[int, list[dict[str, Any]]]] = deque()  # (event index, stack), newest events
        # id(node) -> (node, stack): the node is held so that its id is not reused while known
        self._memo: dict[int, tuple[Any, list[dict[str, Any]]]] = {}  # of an allocation in it
        self._outer: dict[int, tuple[Any, list[dict[str, Any]]]] = {}  # the frames enclosing its call
        self._user: dict[int, tuple[Any, list[dict[str, Any]]]] = {}  # the same, up to the user's outermost
        # one dict per distinct frame, as PyTorch shares them: each step's calls are new nodes on the
        # same lines, and what each frame is (the user's or the shell's) is then read once
        self._frames: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
        self._kinds: Kinds = {}

    def note(self, ptrs: list[int], sizes: list[int], made: list[Any]) -> None:
        """Each allocation's stack, by address: what the blocks live at the end are given.
        ``made``: each allocation's node in the tracer's tree (its parent: the call it sits in)."""
        if not sizes or max(sizes) < STACK_BYTES:  # a loop of small tensors: none gets a stack
            return
        of, last = self.of, self.last
        for i in compress(range(len(sizes)), map(int.__le__, repeat(STACK_BYTES), sizes)):
            last[ptrs[i]] = (sizes[i], of(made[i].parent))

    def keep(self, first: int, sizes: list[int], made: list[Any], window_start: int) -> None:
        """The stacks of the newest events (numbered from ``first``), for their trace entries
        (``made``: as ``note``'s, None where the allocation is too small for a stack)."""
        of = self.of
        if sizes and max(sizes) >= STACK_BYTES:
            self.window.extend(
                (first + i, of(made[i].parent))
                for i in compress(range(len(sizes)), map(int.__le__, repeat(STACK_BYTES), sizes))
            )
        while self.window and self.window[0][0] < window_start:
            self.window.popleft()
        self._memo, self._outer, self._user = {}, {}, {}  # node ids are only good while this session's tree lives
        self._frames, self._kinds = {}, {}

    def window_frames(self, window_start: int) -> dict[int, list[dict[str, Any]]]:
        return {i: f for i, f in self.window if i >= window_start}

    def block_frames(self, ptr: int, size: int, carried: bool) -> list[dict[str, Any]]:
        if carried:
            return self.start_frames.get(ptr, [])
        hit = self.last.get(ptr)
        return hit[1] if hit is not None and hit[0] == size else []

    def of(self, node: Any) -> list[dict[str, Any]]:
        """The stack of an allocation made inside ``node``, innermost frame first."""
        if node is None:
            return []
        hit = self._memo.get(id(node))
        if hit is None:
            from torch._C._profiler import _ExtraFields_PyCall, _ExtraFields_PyCCall

            fields = node.extra_fields
            kind = type(fields)
            if kind is _ExtraFields_PyCCall:
                frames = [self._frame(fields.caller), *self._users(node.parent)]
            elif kind is _ExtraFields_PyCall:
                frames = [self._frame(fields.callsite), *self._users(node)]
            else:
                frames = self._users(node)
            hit = self._memo[id(node)] = (node, frames)
        return hit[1]

    def _users(self, node: Any) -> list[dict[str, Any]]:
        """``_enclosing`` up to the user's outermost frame: a file holds none of the frames of the
        shell, kernel or runner beneath it (once per node: its calls share it)."""
        hit = self._user.get(id(node))
        if hit is None:
            hit = self._user[id(node)] = (node, user_frames(self._enclosing(node), False, self._kinds))
        return hit[1]

    def _enclosing(self, node: Any) -> list[dict[str, Any]]:
        """The frames around ``node``'s call, innermost first: for each Python call, the line
        that made it. Walked upwards until a node already known (no recursion: stacks are deep)."""
        from torch._C._profiler import _ExtraFields_PyCall

        path, known = [], []
        while node is not None:
            hit = self._outer.get(id(node))
            if hit is not None:
                known = hit[1]
                break
            path.append(node)
            node = node.parent
        for n in reversed(path):
            fields = n.extra_fields
            if type(fields) is _ExtraFields_PyCall and n.parent is not None:
                known = [self._frame(fields.caller), *known]
            self._outer[id(n)] = (n, known)
        return known

    def _frame(self, state: Any) -> dict[str, Any]:
        """The frame of a tracer's call site, one dict per distinct frame."""
        key = (state.file_name, state.line_number, state.function_name)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._frames[key] = {"filename": key[0], "line": key[1], "name": key[2]}
        return frame
