"""Summary files: what an interval keeps of a snapshot (``results.intervals.digest``) as small, versioned
JSON, so a folder read again costs milliseconds instead of unpickling every file in full.

The recorder writes ``<file>.summary.json`` beside each of its dumps. Every other snapshot's
summary (verl's, torchtitan's, or one of ours whose summary is missing or stale) is cached in
``cache_dir()`` on first read, never written into the user's folders. A summary counts only
while its snapshot is the file it was made from: the same size, mtime and inode, recorded inside
it (a snapshot rewritten under the same name is read again). Summary files are untrusted input,
like snapshots: one that is malformed (``summary_fields`` checks each field) is ignored with one
warning and the snapshot read instead.

The format (``VERSION`` 6), one JSON object::

    {"format": "memsnap-summary", "version": 6,
     "snapshot": {"size": <bytes>, "mtime_ns": <int>, "ctime_ns": <int>, "inode": <int>},
     "path": <the snapshot's absolute path; cache entries only>,
     "meta": <the snapshot's memsnap block, every field, null where absent>,
     "device": "cuda:0", "baseline_allocated": <bytes>, "peak_allocated": ..., "end_allocated": ...,
     "trace_entries": <int>,
     "top_blocks": [{"size", "addr", "before", "frames": [{"filename", "line", "name"}], "category",
                     "made_in": <the step that made it, in a clear=false history; else null>}],
     "born": [[addr, size], ...], "kept_by_site": [[site, bytes, blocks], ...],
     "held_by_site": [[site, bytes, blocks], ...], "transient": <bytes held only for a while>,
     "by_category": {category: bytes} | null, "by_category_at_peak": ... | null,
     "oom": {"requested", "site", "device_free", "allocated", "by_category", "sites"} | null,
     "time_us": [first, delta, delta, ...], "allocated": [first, delta, ...]}

Bytes are requested bytes, as in ``results.intervals.Interval``; the timeline is decimated (at most a few
thousand points) and stored as differences. ``VERSION`` (``summary_fields``) goes up whenever what a summary holds, or
how any of it is computed, changes: summaries of another version are recomputed without a word.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np

from ..core.clean import clean
from ..core.errors import SnapshotError, excerpt
from ..core.warn import warn_once
from .meta import META_KEY, Meta
from .schema import INT64
from .snapshot import write_atomically
from .summary_fields import BYTES, FIELDS, VERSION, list_of, pair

FORMAT = "memsnap-summary"
SUFFIX = ".summary.json"
MAX_BYTES = 8 << 20  # a summary is tens of KB; anything this large is not one of ours
_POINTS = 1 << 14  # timeline points a summary may hold (decimation keeps ~2,000)


class Malformed(ValueError):
    """A summary file that is not one we could have written."""


def beside(snapshot: Path) -> Path:
    """Where the recorder puts a dump's summary: ``<file>.summary.json`` in its folder."""
    return snapshot.with_name(snapshot.name + SUFFIX)


def cache_dir() -> Path | None:
    """``$MEMSNAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/memsnap``, else ``~/.cache/memsnap``: absolute
    paths only (a relative one would put the cache in whatever folder the user is in, their
    dumps' among them); None when none is given and there is no home directory to find."""
    given = os.environ.get("MEMSNAP_CACHE_DIR")
    if given and os.path.isabs(given):
        return Path(given)
    if given:
        warn_once(
            "summary cache relative",
            f"memsnap: ignoring $MEMSNAP_CACHE_DIR={clean(excerpt(given, 100))}: not an absolute path",
        )
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg) / "memsnap"
    home = _home()
    return Path(home) / ".cache" / "memsnap" if home is not None else None


def _home() -> str | None:
    """$HOME where set and absolute, else the account's home directory (Windows: as
    ``Path.home()`` finds it), else None (a container run as a user id with no account)."""
    if sys.platform == "win32":
        try:
            return str(Path.home())
        except RuntimeError:
            return None
    home = os.environ.get("HOME")
    if not (home and os.path.isabs(home)):
        try:
            import pwd

            home = pwd.getpwuid(os.getuid()).pw_dir
        except (KeyError, OSError):  # no account for this user id
            return None
    return home if home and os.path.isabs(home) else None


def cached(snapshot: Path) -> Path | None:
    """Where a snapshot's summary is cached: named by a hash of its absolute path (None: nowhere)."""
    folder = cache_dir()
    if folder is None:
        return None
    key = hashlib.sha256(os.fsencode(os.path.abspath(snapshot))).hexdigest()[:32]
    return folder / f"{key}.json"


def fingerprint(st: os.stat_result) -> dict[str, int]:
    """What ties a summary to the very file it was made from."""
    # ctime: no one can set it, so a file rewritten in place with its old size and times is caught
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}


def read(snapshot: Path, st: os.stat_result) -> dict[str, Any] | None:
    """The digest of ``snapshot`` (as ``stat`` found it) from its summary beside it or in the
    cache, or None when neither belongs to it."""
    for where, cache in ((beside(snapshot), False), (cached(snapshot), True)):
        if where is None:  # no cache folder: said when a summary would be stored
            continue
        try:
            obj = _load(where)
        except (FileNotFoundError, NotADirectoryError):  # none there (a cache that is a file: said by store)
            continue
        except OSError as e:
            if cache:  # the cache folder itself (unreadable, a name too long): said once, as by store
                _cache_unusable(where.parent, e)
            else:
                _ignored(where, e)
            continue
        except Malformed as e:
            _ignored(where, e)
            continue
        try:
            return decode(obj, st, os.path.abspath(snapshot) if cache else None)
        except _Stale:
            continue
        except (Malformed, SnapshotError) as e:
            _ignored(where, e)
    return None


def write_beside(snapshot: Path, d: dict[str, Any]) -> Path:
    """Write ``snapshot``'s summary beside it (the recorder's, after the dump is in place)."""
    target = beside(snapshot)
    _write(target, encode(d, os.stat(snapshot)))
    return target


def store(snapshot: Path, st: os.stat_result, d: dict[str, Any]) -> None:
    """Cache ``snapshot``'s summary; a cache that cannot be written is said once, never raised."""
    target = cached(snapshot)
    if target is None:
        warn_once(
            "summary cache none",
            "memsnap: no folder to cache summaries in (no $HOME, and no home directory for this user): "
            "set $MEMSNAP_CACHE_DIR to a writable folder",
        )
        return
    try:
        _write(target, encode(d, st, os.path.abspath(snapshot)))
    except OSError as e:
        _cache_unusable(target.parent, e)
    except (ValueError, TypeError, RecursionError) as e:  # a figure JSON cannot hold: read it afresh next time
        warn_once(f"summary {snapshot}", f"memsnap: cannot cache the summary of {clean(str(snapshot))}: {e}")


def _cache_unusable(folder: Path, e: OSError) -> None:
    warn_once(
        f"summary cache {folder}",
        f"memsnap: cannot cache summaries in {clean(excerpt(str(folder), 120))}: {e.strerror or e}; "
        "set $MEMSNAP_CACHE_DIR to a writable folder",
    )


def _ignored(where: Path, e: BaseException) -> None:
    """One warning per summary file and process: a bad one is read past, never trusted."""
    reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
    warn_once(
        f"summary {where}",
        f"memsnap: ignoring the summary {clean(str(where))}: {excerpt(reason, 200)[1:-1]}; "
        "reading its snapshot instead",
    )


def _write(target: Path, obj: dict[str, Any]) -> None:
    """Atomically, as snapshots are."""
    data = json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()
    write_atomically(target, lambda f: f.write(data))


def _load(where: Path) -> Any:
    """A summary file's JSON: regular files of at most ``MAX_BYTES`` only."""
    fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Malformed("not a regular file")
        if st.st_size > MAX_BYTES:
            raise Malformed(f"{st.st_size:,} bytes, over the {MAX_BYTES:,}-byte limit for a summary")
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        data = f.read(MAX_BYTES + 1)
    try:
        return json.loads(data, object_pairs_hook=_once_each)
    except Exception as e:  # not UTF-8, not JSON, nested past the recursion limit, a 5,000-digit int...
        raise Malformed(f"not JSON ({type(e).__name__}: {excerpt(str(e), 80)[1:-1]})") from None


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once (json keeps the last of a repeated key)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise Malformed("a key is given twice")
    return obj


class _Stale(Exception):
    """A well-formed summary of another file, or of another version."""


def encode(d: dict[str, Any], st: os.stat_result, path: str | None = None) -> dict[str, Any]:
    """``d`` (a ``results.intervals.digest``) as the summary file's JSON object."""
    obj: dict[str, Any] = {"format": FORMAT, "version": VERSION, "snapshot": fingerprint(st)}
    if path is not None:
        obj["path"] = path
    obj["meta"] = d["meta"].to_dict()
    for key in FIELDS:
        obj[key] = d[key]
    obj["born"] = [[a, s] for a, s in d["born"].items()]
    for key in ("time_us", "allocated"):
        values = d[key].tolist()
        obj[key] = values[:1] + np.diff(d[key]).tolist() if values else []
    return obj


def decode(obj: Any, st: os.stat_result, path: str | None = None) -> dict[str, Any]:
    """The digest a summary holds: ``_Stale`` when it belongs to another file or version,
    ``Malformed`` when it is not one we could have written."""
    if type(obj) is not dict or obj.get("format") != FORMAT:
        raise Malformed("not a memsnap summary")
    if obj.get("version") != VERSION:
        raise _Stale
    if obj.get("snapshot") != fingerprint(st) or (path is not None and obj.get("path") != path):
        raise _Stale
    d: dict[str, Any] = {"meta": Meta.from_snapshot({META_KEY: obj.get("meta")})}
    for key, check in FIELDS.items():
        value = obj.get(key)
        if not check(value):
            raise Malformed(f"its {key} is not {check.__doc__}: {excerpt(value, 80)}")
    d.update((key, obj[key]) for key in FIELDS)
    born: Any = obj.get("born")
    if not list_of(born, pair):
        raise Malformed(f"its born is not a list of [address, size]: {excerpt(born, 80)}")
    d["born"] = dict(map(tuple, born))
    timeline = [_timeline(obj.get(key), key) for key in ("time_us", "allocated")]
    if len(timeline[0]) != len(timeline[1]):
        raise Malformed("its time_us and allocated differ in length")
    d["time_us"], d["allocated"] = timeline
    # what a snapshot's figures always satisfy: the peak is the most at any moment, start and end included
    peak = d["peak_allocated"]
    if peak < max(d["baseline_allocated"], d["end_allocated"]) or (len(timeline[1]) and timeline[1].max() > peak):
        raise Malformed("its figures contradict each other (a peak below its start, end or timeline)")
    return d


def _timeline(deltas: Any, key: str) -> np.ndarray:
    if not (type(deltas) is list and len(deltas) <= _POINTS and all(type(v) is int for v in deltas)):
        raise Malformed(f"its {key} is not a list of at most {_POINTS:,} ints")
    values = list(accumulate(deltas))
    low = 0 if key == "time_us" else -BYTES
    if values and not (min(values) >= low and max(values) < INT64):
        raise Malformed(f"its {key} leaves the range of {key}")
    return np.asarray(values, dtype=np.int64)
