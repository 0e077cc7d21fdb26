"""Where merkle-db's time goes: a wall-clock sampling profiler across threads, and a byte census.

The comparison benchmark (``bench/compare.py``) profiles merkle-db's side of
every target it misses. ``cProfile`` sees only the calling thread, but
merkle-db encodes, hashes and writes segments on a thread pool, so its
profile of a bulk load is mostly "waiting for a future". :func:`sample`
instead looks at every thread's Python stack every ``interval`` seconds
(``sys._current_frames``) and counts, per sample of a thread that is doing
work (not parked on a lock, a queue or a future):

* the deepest merkle-db frame on the stack: the merkle function responsible,
  including the native library calls it makes (Arrow, numpy, BLAKE3, I/O);
* the innermost frame: the code actually running (self time);
* every merkle-db frame on the stack, once (cumulative time).

An in-process sampler needs the GIL to look, so it mostly wakes when the
running code releases it (Arrow and numpy calls, I/O): pure-Python work is
under-counted. When ``py-spy`` is installed (on ``PATH``, or named by
``$MERKLE_BENCH_PYSPY``), :func:`sample` runs it on this process instead
(``py-spy record --pid``): it reads the stacks from outside, native calls and
all, without that bias. The section says which one was used.

:func:`lake_census` answers the same question for bytes: how much of a
lake's directory is tablet segments, pending batches, index and root nodes,
journal entries.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from bench.common import fmt_bytes, markdown_table

__all__ = ["Census", "Phases", "Profile", "Spot", "lake_census", "phases", "sample"]

_MERKLE_DIR = str(Path(__file__).resolve().parent.parent / "merkle") + os.sep

#: (file name ending, function name) of frames where a thread is parked, not working.
_IDLE = {
    ("threading.py", "wait"),
    ("threading.py", "_wait_for_tstate_lock"),
    ("threading.py", "join"),
    ("queue.py", "get"),
    (os.path.join("concurrent", "futures", "thread.py"), "_worker"),
    (os.path.join("concurrent", "futures", "_base.py"), "result"),
    (os.path.join("concurrent", "futures", "_base.py"), "wait"),
}


def _where(code: CodeType) -> str:
    """A short name for a code object, e.g. ``merkle/tablets/rows.py:sort_rows``."""
    filename = code.co_filename
    marker = f"{os.sep}site-packages{os.sep}"
    if marker in filename:
        filename = filename.split(marker, 1)[1]
    elif filename.startswith(_MERKLE_DIR):
        filename = "merkle/" + filename[len(_MERKLE_DIR) :]
    else:
        filename = os.path.basename(filename)
    return f"{filename}:{code.co_qualname}"


def _is_idle(code: CodeType) -> bool:
    return any(code.co_filename.endswith(f) and code.co_name == n for f, n in _IDLE)


def _stack(frame: FrameType | None) -> Iterator[CodeType]:
    while frame is not None:
        yield frame.f_code
        frame = frame.f_back


def _timed(fn: Callable[[], Any], runs: int) -> float:
    """Seconds taken by calling ``fn`` ``runs`` times."""
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return time.perf_counter() - start


@dataclass
class Profile:
    """Samples of busy threads while a function ran (see the module doc)."""

    wall: float = 0.0
    runs: int = 0
    source: str = "in-process sampler"
    busy: int = 0  # busy-thread samples
    ticks: int = 0  # sampler wake-ups
    owner: Counter[str] = field(default_factory=Counter)  # deepest merkle frame
    leaf: Counter[str] = field(default_factory=Counter)  # innermost frame
    cumulative: Counter[str] = field(default_factory=Counter)  # any merkle frame

    def tally(self, leaf: str, merkle: list[str], count: int = 1) -> None:
        """Count one busy stack: its innermost frame and its merkle-db frames (innermost first)."""
        self.busy += count
        self.leaf[leaf] += count
        self.owner[merkle[0] if merkle else "(no merkle-db frame)"] += count
        for name in set(merkle):
            self.cumulative[name] += count

    def share(self, count: int) -> str:
        return f"{100 * count / self.busy:.0f}%" if self.busy else "-"

    def markdown(self, top: int = 8) -> str:
        """Three small tables: by merkle function (self + calls out), cumulative, and leaf."""
        if not self.busy:
            return "_no busy samples: the operation is too short for the sampler_"
        head = (
            f"{self.runs} run(s), {self.wall / max(1, self.runs) * 1e3:.3g} ms each; "
            f"{self.busy:,} busy-thread samples by the {self.source}"
        )
        if self.ticks:  # the in-process sampler knows how often it looked
            head += f" ({self.busy / self.ticks:.2f} busy threads on average)"
        head += "."
        owned = markdown_table(
            ["deepest merkle-db function (its own code and the library calls it makes)", "share"],
            [(f"`{name}`", self.share(n)) for name, n in self.owner.most_common(top)],
        )
        cumulative = markdown_table(
            ["merkle-db function on the stack (cumulative)", "share"],
            [(f"`{name}`", self.share(n)) for name, n in self.cumulative.most_common(top)],
        )
        leaves = markdown_table(
            ["innermost frame (self)", "share"],
            [(f"`{name}`", self.share(n)) for name, n in self.leaf.most_common(top)],
        )
        return f"{head}\n\n{owned}\n\n{cumulative}\n\n{leaves}"


def pyspy() -> str | None:
    """The py-spy executable: ``$MERKLE_BENCH_PYSPY`` or ``py-spy`` on ``PATH`` (None: neither)."""
    named = os.environ.get("MERKLE_BENCH_PYSPY")
    if named:
        return named if os.access(named, os.X_OK) else None
    return shutil.which("py-spy")


def sample(fn: Callable[[], Any], *, runs: int = 1, interval: float = 0.0005) -> Profile:
    """Run ``fn`` ``runs`` times and sample where the threads spend the time.

    With py-spy available (:func:`pyspy`) it samples this process from
    outside; otherwise an in-process thread samples every other thread's
    stack every ``interval`` seconds (see the module doc for its bias).
    """
    exe = pyspy()
    if exe is not None:
        return _sample_pyspy(exe, fn, runs, interval)
    return _sample_inprocess(fn, runs, interval)


#: Innermost frames of a parked thread, as py-spy names them (its idle check misses some).
_PYSPY_IDLE = (
    "threading.py:Condition.wait",
    "threading.py:Event.wait",
    "threading.py:Thread._wait_for_tstate_lock",
    "threading.py:Thread.join",
    "queue.py:Queue.get",
    "thread.py:_worker",
    "_base.py:Future.result",
    "_base.py:wait",
    "compare_profile.py:_sample_pyspy",  # this function waiting for py-spy to attach
)

_PYSPY_FRAME = re.compile(r"(?P<func>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")


def _pyspy_name(frame: str) -> tuple[str, bool]:
    """A py-spy raw frame ``func (file:line)`` as (short name, is a merkle-db frame)."""
    found = _PYSPY_FRAME.match(frame)
    if found is None:
        return frame, False
    filename, func = found["file"], found["func"]
    if filename.startswith(_MERKLE_DIR):
        filename = "merkle/" + filename[len(_MERKLE_DIR) :]
    marker = f"{os.sep}site-packages{os.sep}"
    if marker in filename:
        filename = filename.split(marker, 1)[1]
    elif os.path.isabs(filename):
        filename = os.path.basename(filename)
    # py-spy already shortens paths on sys.path: "merkle/...", "pyarrow/..."
    return f"{filename}:{func}", filename.startswith("merkle/")


def _sample_pyspy(exe: str, fn: Callable[[], Any], runs: int, interval: float) -> Profile:
    profile = Profile(runs=runs, source="py-spy")
    rate = min(1000, max(1, round(1 / interval)))  # more would slow a 2-core machine
    with tempfile.TemporaryDirectory(prefix="merkle-pyspy-") as scratch:
        out = os.path.join(scratch, "stacks.txt")
        spy = subprocess.Popen(
            [
                *(exe, "record", "--pid", str(os.getpid()), "--rate", str(rate)),
                *("--format", "raw", "--output", out, "--threads", "--nonblocking"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)  # attach before the work starts
        try:
            profile.wall = _timed(fn, runs)
        finally:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
            spy.wait(timeout=60)
        try:
            with open(out, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except OSError:
            return _sample_inprocess(fn, runs, interval)
    for line in lines:  # py-spy leaves idle threads out
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        named = [_pyspy_name(f) for f in reversed(frames)]  # innermost first
        if not named or named[0][0].endswith(_PYSPY_IDLE):
            continue
        profile.tally(named[0][0], [name for name, is_merkle in named if is_merkle], count)
    profile.ticks = 0  # py-spy's own rate varies with load: no per-look average
    return profile


def _sample_inprocess(fn: Callable[[], Any], runs: int, interval: float) -> Profile:
    """The in-process sampler. The interpreter's switch interval is shortened while
    sampling so that the sampler gets the GIL on time; it is restored afterwards."""
    profile = Profile(runs=runs)
    stop = threading.Event()

    def sampler() -> None:
        own = threading.get_ident()
        while not stop.is_set():
            profile.ticks += 1
            for ident, frame in sys._current_frames().items():
                if ident == own:  # the caller's thread is sampled: it does work too
                    continue
                codes = list(_stack(frame))
                if not codes or _is_idle(codes[0]):
                    continue
                merkle = [_where(c) for c in codes if c.co_filename.startswith(_MERKLE_DIR)]
                profile.tally(_where(codes[0]), merkle)
            time.sleep(interval)

    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval)
    thread = threading.Thread(target=sampler, name="bench-sampler", daemon=True)
    thread.start()
    try:
        profile.wall = _timed(fn, runs)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(previous)
    return profile


# -- wall-clock phases ------------------------------------------------------------


@dataclass(frozen=True)
class Spot:
    """A function to time while a phase profile runs: ``where`` is ``module:qualname``.

    ``nested`` spots run inside another spot (they are shown indented and not
    subtracted from the rest); ``threads`` spots run on worker threads (their
    time is summed over the threads and may exceed the wall time).
    """

    label: str
    where: str
    nested: bool = False
    threads: bool = False


@dataclass
class Phases:
    """Time spent inside each spot while a function ran ``runs`` times."""

    wall: float
    runs: int
    spots: list[Spot]
    spent: dict[str, float]
    calls: dict[str, int]
    missing: list[str]

    def markdown(self) -> str:
        per_run = self.wall / max(1, self.runs)
        rows = []
        outer = 0.0
        for spot in self.spots:
            if spot.where in self.missing:
                continue
            seconds = self.spent[spot.label] / max(1, self.runs)
            if not spot.nested and not spot.threads:
                outer += seconds
            label = ("... of which " if spot.nested else "") + spot.label
            if spot.threads:
                label += " (summed over worker threads)"
            rows.append(
                (
                    label,
                    f"`{spot.where}`",
                    f"{self.calls[spot.label] / max(1, self.runs):.3g}",
                    fmt_ms(seconds),
                    f"{100 * seconds / per_run:.0f}%",
                )
            )
        rest = max(0.0, per_run - outer)
        rows.append(("everything else", "", "", fmt_ms(rest), f"{100 * rest / per_run:.0f}%"))
        table = markdown_table(["phase", "function", "calls/run", "time/run", "of wall"], rows)
        note = f"Wall-clock time per run: {fmt_ms(per_run)} ({self.runs} runs)."
        if self.missing:
            note += " Not found (renamed?): " + ", ".join(f"`{m}`" for m in self.missing) + "."
        return f"{note}\n\n{table}"


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _resolve(where: str) -> tuple[Any, str, Any] | None:
    module_name, _, qualname = where.partition(":")
    try:
        owner: Any = importlib.import_module(module_name)
        *path, attr = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)
    except (ImportError, AttributeError, KeyError):
        return None
    return owner, attr, original


def phases(fn: Callable[[], Any], spots: list[Spot], *, runs: int = 1) -> Phases:
    """Run ``fn`` ``runs`` times with every spot wrapped in a timer; restore them after.

    Wall-clock time, no sampling: the shares are exact for the calling thread,
    I/O waits included (which a sampling profiler leaves out as idle).
    """
    spent = dict.fromkeys((s.label for s in spots), 0.0)
    calls = dict.fromkeys((s.label for s in spots), 0)
    lock = threading.Lock()
    patched: list[tuple[Any, str, Any]] = []
    missing: list[str] = []

    def timer(label: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                took = time.perf_counter() - began
                with lock:
                    spent[label] += took
                    calls[label] += 1

        return timed

    for spot in spots:
        found = _resolve(spot.where)
        if found is None:
            missing.append(spot.where)
            continue
        owner, attr, original = found
        if isinstance(original, classmethod | staticmethod):
            replacement: Any = type(original)(timer(spot.label, original.__func__))
        elif callable(original):
            replacement = timer(spot.label, original)
        else:
            missing.append(spot.where)
            continue
        setattr(owner, attr, replacement)
        patched.append((owner, attr, original))
    try:
        wall = _timed(fn, runs)
    finally:
        for owner, attr, original in reversed(patched):
            setattr(owner, attr, original)
    return Phases(wall, runs, spots, spent, calls, missing)


# -- bytes ------------------------------------------------------------------------


@dataclass
class Census:
    """Bytes (apparent sizes) of a lake directory by what they hold."""

    kinds: Counter[str] = field(default_factory=Counter)
    files: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def minus(self, before: Census) -> Census:
        """What was added since ``before`` (blocks are never rewritten in place)."""
        return Census(self.kinds - before.kinds, self.files - before.files)

    def markdown(self, title: str) -> str:
        total = self.total or 1
        rows = [
            (kind, f"{self.files[kind]:,}", fmt_bytes(n), f"{100 * n / total:.1f}%")
            for kind, n in self.kinds.most_common()
        ]
        return markdown_table([title, "files", "bytes", "share"], rows)


def lake_census(root: Path) -> Census:
    """Classify every file of the lake at ``root``.

    Nodes (``dag-cbor`` blocks) are decoded for their ``type``; raw blocks
    (Arrow IPC payloads) are named by the type of the node that links to
    them (a tablet's segment, a batch's upserts). Everything outside
    ``blocks/`` is counted by its top directory (journal, leases).
    """
    from merkle.blocks.cid import CID
    from merkle.blocks.codec import decode_node, iter_links

    census = Census()
    parents: dict[str, str] = {}
    raw: dict[str, int] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            size = path.stat().st_size
            rel = path.relative_to(root).parts
            if rel[0] != "blocks" or name.startswith("."):
                kind = "journal (refs/)" if rel[0] == "refs" else f"{rel[0]}/"
                census.kinds[kind] += size
                census.files[kind] += 1
                continue
            cid = CID.parse(name)
            if cid.codec == 0x55:
                raw[name] = size
                continue
            node = decode_node(path.read_bytes())
            kind = node.get("type", "?") if isinstance(node, dict) else "?"
            census.kinds[f"{kind} nodes"] += size
            census.files[f"{kind} nodes"] += 1
            for link in iter_links(node):
                parents.setdefault(str(link), kind)
    for name, size in raw.items():
        kind = f"raw under {parents.get(name, 'no node')}"
        census.kinds[kind] += size
        census.files[kind] += 1
    return census
