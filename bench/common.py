"""What every benchmark shares: timing, rate formatting, scratch space, machine facts, output.

A benchmark module measures and returns Markdown; this module keeps the
numbers honest and comparable across modules (the same clock, the same
percentiles, the same units: MB is 10**6 bytes) and lets each module rewrite
only its own section of ``doc/benchmarks.md``.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import logging
import os
import platform
import random
import re
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "REPO_ROOT",
    "Timing",
    "fmt_bytes",
    "fmt_duration",
    "fmt_rate",
    "fmt_rows",
    "machine_info",
    "machine_markdown",
    "markdown_table",
    "mb_per_s",
    "moto_endpoint",
    "new_bucket",
    "repeat",
    "replace_section",
    "temp_dir",
    "time_each",
    "time_interleaved",
    "write_section",
]

T = TypeVar("T")

#: The repository root: relative output paths are taken from here, not the CWD.
REPO_ROOT = Path(__file__).resolve().parent.parent

_SECTION_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*\Z")


# -- timing ----------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Durations in seconds of repeated runs of one operation."""

    samples: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("a Timing needs at least one sample")

    @property
    def total(self) -> float:
        return sum(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p50(self) -> float:
        return self.percentile(50)

    @property
    def p99(self) -> float:
        return self.percentile(99)

    @property
    def best(self) -> float:
        return min(self.samples)

    def percentile(self, pct: float) -> float:
        """The ``pct`` percentile by the nearest-rank method (an observed sample)."""
        ordered = sorted(self.samples)
        rank = max(1, -(-len(ordered) * pct // 100))  # ceil(n * pct / 100), at least 1
        return ordered[int(rank) - 1]

    def __len__(self) -> int:
        return len(self.samples)


def repeat(fn: Callable[[], Any], *, times: int, warmup: int = 1) -> Timing:
    """Run ``fn`` ``warmup`` times unmeasured, then ``times`` times, timing each run."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples))


def time_each(fn: Callable[[T], Any], items: Iterable[T]) -> Timing:
    """Time ``fn(item)`` for every item: one sample per item (per-operation latency)."""
    samples = []
    clock = time.perf_counter
    for item in items:
        start = clock()
        fn(item)
        samples.append(clock() - start)
    return Timing(tuple(samples))


def time_interleaved(
    fns: Mapping[str, Callable[[T], Any]], items: Iterable[T]
) -> dict[str, Timing]:
    """Time every function on every item, taking turns item by item.

    Competitors measured one after the other see different background load
    (page-cache writeback, other processes); interleaved, each item's runs
    share the same conditions. The order of the turns is shuffled each item
    (seeded, so runs repeat): a fixed rotation always put each function right
    after the same other one, whose aftermath (a multithreaded engine's
    background work, dirty pages being written back) it then always paid.
    """
    labels = list(fns)
    samples: dict[str, list[float]] = {label: [] for label in labels}
    clock = time.perf_counter
    order = random.Random(len(labels))
    for item in items:
        turns = labels[:]
        order.shuffle(turns)
        for label in turns:
            start = clock()
            fns[label](item)
            samples[label].append(clock() - start)
    return {label: Timing(tuple(taken)) for label, taken in samples.items()}


# -- formatting ------------------------------------------------------------------


def mb_per_s(nbytes: float, seconds: float) -> float:
    """Throughput in MB/s (10**6 bytes per second)."""
    return nbytes / seconds / 1e6 if seconds > 0 else float("inf")


def fmt_rate(nbytes: float, seconds: float) -> str:
    """``nbytes`` moved in ``seconds`` as MB/s, three significant digits."""
    rate = mb_per_s(nbytes, seconds)
    return f"{rate:,.0f} MB/s" if rate >= 100 else f"{rate:.3g} MB/s"


def fmt_rows(rows: float, seconds: float) -> str:
    """``rows`` handled in ``seconds`` as rows/s with a k/M suffix."""
    rate = rows / seconds if seconds > 0 else float("inf")
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if rate >= scale:
            return f"{rate / scale:.3g} {suffix} rows/s"
    return f"{rate:.3g} rows/s"


def fmt_duration(seconds: float) -> str:
    """A duration with a unit that keeps three significant digits (ns, µs, ms, s)."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_bytes(nbytes: int) -> str:
    """A size in binary units (B, KiB, MiB, GiB)."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.4g} {unit}"
        value /= 1024
    return f"{value:.4g} GiB"


def markdown_table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], *, numbers: bool = True
) -> str:
    """A GitHub-flavoured Markdown table; the first column left-aligned, the rest right
    (``numbers=False``: all left)."""
    rest = "---:" if numbers else ":---"
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join([":---"] + [rest] * (len(headers) - 1)) + "|",
    ]
    lines.extend("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)
    return "\n".join(lines)


# -- scratch space and machine facts ---------------------------------------------


@contextlib.contextmanager
def temp_dir(prefix: str = "merkle-bench-") -> Iterator[Path]:
    """A fresh directory, removed afterwards, under ``$MERKLE_BENCH_TMP`` or the system temp.

    File benchmarks measure the disk under this directory: point the variable
    at the disk you care about (the default temp directory may be tmpfs).
    """
    base = os.environ.get("MERKLE_BENCH_TMP") or None
    with tempfile.TemporaryDirectory(prefix=prefix, dir=base) as path:
        yield Path(path)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _filesystem_of(path: str) -> str:
    """The filesystem type holding ``path`` (Linux /proc/mounts), or "unknown"."""
    try:
        real = os.path.realpath(path)
        best = ("", "unknown")
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                if (
                    len(fields) >= 3
                    and real.startswith(fields[1])
                    and len(fields[1]) > len(best[0])
                ):
                    best = (fields[1], fields[2])
        return best[1]
    except OSError:
        return "unknown"


_PACKAGES = ("merkle-db", "blake3", "cbor2", "multiformats", "pyarrow", "deltalake", "pylance")


def machine_info() -> dict[str, str]:
    """CPU, cores, memory, OS, Python and the versions of the packages benchmarks compare."""
    info = {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count() or "?"),
        "os": platform.platform(terse=True),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "scratch filesystem": _filesystem_of(
            os.environ.get("MERKLE_BENCH_TMP") or tempfile.gettempdir()
        ),
    }
    with contextlib.suppress(OSError, ValueError):
        pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["memory"] = f"{pages * page_size / 2**30:.0f} GiB"
    for name in _PACKAGES:
        try:
            info[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            info[name] = "not installed"
    return info


def machine_markdown() -> str:
    """:func:`machine_info` as a two-column Markdown table."""
    return markdown_table(["machine", ""], machine_info().items(), numbers=False)


# -- output ----------------------------------------------------------------------


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def replace_section(document: str, name: str, markdown: str) -> str:
    """``document`` with section ``name`` set to ``markdown``.

    A document without the section gets it appended under a ``## name`` heading.
    """
    if not _SECTION_NAME.match(name):
        raise ValueError(
            f"benchmark section name {name!r} must be lower-case letters, digits, '_', '.', '-'"
        )
    start, end = _markers(name)
    body = f"{start}\n{markdown.strip()}\n{end}"
    begins, ends = document.count(start), document.count(end)
    if begins == ends == 0:
        separator = (
            ""
            if not document or document.endswith("\n\n")
            else ("\n" if document.endswith("\n") else "\n\n")
        )
        # A new section gets a heading outside its markers: later runs keep it as edited.
        return f"{document}{separator}## {name}\n\n{body}\n"
    if begins != 1 or ends != 1 or document.index(start) > document.index(end):
        raise ValueError(
            f"the markers of benchmark section {name!r} are broken ({begins} start, {ends} end); "
            f"fix them by hand so that {start} comes once, before {end}"
        )
    head, rest = document.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + body + tail


def write_section(
    name: str, markdown: str, path: str | os.PathLike[str] = "doc/benchmarks.md"
) -> Path:
    """Replace only the text between the ``bench:NAME`` markers of ``path`` (append if absent).

    Several benchmark modules update one file independently: each owns the
    text between its own markers and nothing else. A relative ``path`` is
    taken from the repository root. The update holds an exclusive lock on the
    file's directory and replaces the file atomically, so concurrent runs
    neither interleave nor leave a half-written file. Returns the path.
    """
    target = Path(path)
    if not target.is_absolute():
        target = REPO_ROOT / target
    target.parent.mkdir(parents=True, exist_ok=True)
    directory = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)  # released when the descriptor closes
        document = target.read_text(encoding="utf-8") if target.exists() else ""
        updated = replace_section(document, name, markdown)
        temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temp.write_text(updated, encoding="utf-8")
        os.replace(temp, target)
    finally:
        os.close(directory)
    return target


@contextlib.contextmanager
def moto_endpoint() -> Iterator[str]:
    """The endpoint of a fresh moto S3 server on 127.0.0.1 (any free port), stopped afterwards."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_DEFAULT_REGION", "us-east-1"),
    ):
        os.environ.setdefault(name, value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def new_bucket(endpoint: str) -> str:
    """A new, empty bucket on the S3 server at ``endpoint``: its name."""
    import boto3

    name = f"bench-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name
