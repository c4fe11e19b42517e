"""What the CPU route allows and says at its limits: the torch releases it runs on, another
profile hook, an interval too long for PyTorch's profiler, and a profiler started inside a cell."""

from __future__ import annotations

import re
import sys

from ....core.warn import warn_once
from ..base import BackendError

# torch releases the CPU route was tested with: it uses private profiler APIs (torch._C).
TESTED_TORCH = ("2.13", "2.14")
# Below this it is refused: torch 2.1's profiler crashed the process under it (a segfault in
# ending a session), and a storage's Python object there does not live as long as the storage.
OLDEST_TORCH = (2, 5)


def profile_hook_on() -> bool:
    """Whether a ``sys.setprofile`` hook of someone else's is on (a profiler, a tracer): PyTorch's
    Python tracer would take its place for the cell and remove it after, so the cell records
    without stacks instead, and says so once."""
    hook = sys.getprofile()
    if hook is None:
        return False
    name = getattr(hook, "__qualname__", None) or type(hook).__qualname__
    warn_once(
        "profile-hook",
        f"memsnap: a Python profile hook is on (sys.setprofile: {name}); the CPU route records "
        "without Python stacks while it is, so that it keeps running through the cell",
    )
    return True


def refuse_if_too_old() -> None:
    import torch

    version = str(torch.__version__)
    release = re.match(r"(\d+)\.(\d+)", version)
    if release is not None and (int(release[1]), int(release[2])) < OLDEST_TORCH:
        raise BackendError(
            f"device=cpu: the CPU route needs torch {'.'.join(map(str, OLDEST_TORCH))} or newer "
            f"(it reads PyTorch's private profiler API, which crashed older releases); this is torch "
            f"{version}. Record on an accelerator, or upgrade torch."
        )


def warn_if_untested() -> None:
    import torch

    version = torch.__version__
    if not version.startswith(tuple(f"{v}." for v in TESTED_TORCH)):
        warn_once(
            "untested-torch",
            f"memsnap: the CPU route uses PyTorch's private profiler API and was "
            f"tested with torch {', '.join(TESTED_TORCH)}; this is torch {version}. If its "
            "figures look wrong, record on an accelerator or report it.",
        )


HUGE = 1_000_000  # allocation events in one interval past which PyTorch's profiler holds GBs


STACKS_HINT = 100_000  # allocation events past which the Python tracer's cost is worth a word


def warn_if_huge(events: int, stacks: bool) -> None:
    if stacks and events > STACKS_HINT:
        warn_once(
            "cpu-stacks",
            f"memsnap: this interval made {events:,} CPU allocation events. On loops of small tensors the "
            "Python tracer that gives allocations their stacks costs about as much again as the profiler "
            "itself; context=none records without it (no stacks).",
        )
    if events > HUGE:
        warn_once(
            "cpu-huge",
            f"memsnap: this interval made {events:,} CPU allocation events; PyTorch's profiler keeps about "
            f"2 KB of each (~{events * 2 / 1e6:.1f} GB here) until the interval ends. For long loops of small "
            "tensors record a few steps (steps=1,5,10 with mark(step)) or record on an accelerator.",
        )


TAKEN_OVER = (
    "a torch.profiler started inside took over the CPU route's profiler session, so its allocations "
    "are not in this step (profile outside %%memsnap, or record on an accelerator)"
)
PROFILER_REFUSED = (
    "a profiler started inside could not start: the CPU route's profiler session runs through the "
    "cell and PyTorch allows one a thread (profile outside %%memsnap, or record on an accelerator)"
)
