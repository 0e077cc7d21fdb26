"""The scale curve: merkle-db, Lance and Delta Lake at 1M, 10M and 30M rows, same run.

Issue 13. For each size one table (``bench.sides.make_table``: a shuffled
int64 key, two strings, a double, a timestamp) is loaded into all three
stores on the local disk, then each operation runs on each store in turn:

* **load**: a new table from Arrow, committed (merkle-db: durable when it
  returns), in a child process of its own so that its peak memory (the
  growth of the peak RSS over the RSS before the load) is its own, after a
  1,000-row load into another store in that process (the library's first
  use, imports included, is not counted, for every system);
* **10-row commit**: 5 updates and 5 inserts, upserted (merkle-db
  ``write`` + ``commit``, Lance ``merge_insert``, Delta ``merge``), on an
  open handle; median;
* **lookups, cold**: a fresh handle (merkle-db ``connect`` + ``open_db``,
  ``lance.dataset``, ``DeltaTable``) before each lookup, only the lookup
  timed: one key (median of many) and 1,000 keys (median of a few); Lance
  with a BTREE index on the key (built after the load, not counted in it);
* **lookups, warm**: one handle, after 100 unmeasured lookups; median;
* **1% key-range scan, cold** and **full scan, cold** (fresh handle);
* **GC after 100 small commits**: 100 more 10-row commits, then merkle-db
  ``gc(keep_versions=1, grace="0s")`` and Lance
  ``cleanup_old_versions(older_than=0)``.

"Cold" means no in-process cache (a fresh handle); the files are in the OS
page cache (the machine has far more memory than the tables), for every
system alike. Every figure says its cache state and table size. The ratio is
merkle-db over the better peer in the same run; the growth factors are
merkle-db's time at one size over the size before.

Run: ``python -m bench scale [--quick]`` (quick: 100,000 and 300,000 rows).
``MERKLE_BENCH_SCALE_SIZES=1000000,10000000`` picks the sizes.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import multiprocessing
import os
import queue
import random
import resource
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import merkle
from bench.common import fmt_bytes, fmt_duration, markdown_table, temp_dir
from bench.sides import (
    DELTA,
    LANCE,
    MERKLE,
    DeltaSide,
    LanceSide,
    MerkleSide,
    Side,
    make_table,
    with_values,
)

__all__ = ["run"]

SYSTEMS = (MERKLE, LANCE, DELTA)
PEERS = (LANCE, DELTA)
SEED = 13

#: Targets of issue 13: merkle-db / the better peer, at 1M and 10M rows (cold lookups).
TARGETS = {
    "load": 1.0,
    "commit": 0.25,
    "get1_cold": 0.5,
    "get1000_cold": 0.5,
    "scan_cold": 0.5,
}


@dataclass(frozen=True)
class Plan:
    """How many of each operation one size gets."""

    commits: int
    delta_commits: int
    lookups: int
    many_rounds: int
    warm_lookups: int
    scans: int
    gc_commits: int


FULL = Plan(
    commits=40,
    delta_commits=4,
    lookups=60,  # 40 left the 1M-row single-key median moving 15% between runs
    many_rounds=9,  # 5 left the 1M-row median moving 2x between runs
    warm_lookups=200,
    scans=5,
    gc_commits=100,
)
QUICK = Plan(
    commits=10,
    delta_commits=2,
    lookups=10,
    many_rounds=3,
    warm_lookups=50,
    scans=3,
    gc_commits=20,
)

OPS = [
    ("load", "load, per row (write + commit)"),
    ("load_mem", "load: peak memory over the input"),
    ("commit", "10-row commit (5 updates, 5 inserts), open handle, p50"),
    ("get1_cold", "single-key lookup, cold, p50"),
    ("get1000_cold", "1,000-key lookup, cold, median"),
    ("get1_warm", "single-key lookup, warm, p50"),
    ("range_cold", "1% key-range scan, cold, median"),
    ("scan_cold", "full scan to Arrow, cold, median"),
    ("gc", "GC after 100 small commits"),
]


@dataclass
class Result:
    """Every figure of one size: op -> system -> seconds (or bytes for memory)."""

    rows: int
    figures: dict[str, dict[str, float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def put(self, op: str, system: str, value: float) -> None:
        self.figures.setdefault(op, {})[system] = value


# -- loading in a child process (its own peak memory) ----------------------------------


def _side(system: str, root: Path) -> Side:
    if system == MERKLE:
        return MerkleSide(root)
    if system == LANCE:
        return LanceSide(root)
    return DeltaSide(root)


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    """Restart the kernel's count of this process's peak RSS (Linux 4.0+), so that the
    peak read after the load is the load's, not that of making its input."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


def _peak(reset: bool) -> int:
    """The peak RSS since :func:`_reset_peak` (or since the process began)."""
    if reset:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _load_child(system: str, root: str, rows: int, out: Any) -> None:
    # A small load first, into a store of its own, so that what is timed is the load
    # and not the process's first use of the library (imports, thread pools, a
    # runtime's start; merkle-db imports its database layer on first use): ~70 ms
    # for merkle-db with bytecode cached, ~190 ms without.
    scratch = Path(f"{root}-warm-up")
    scratch.mkdir()
    warm = _side(system, scratch)
    warm.load(make_table(1_000, SEED))
    warm.close()
    shutil.rmtree(scratch)
    data = make_table(rows, SEED)
    before = _rss()
    reset = _reset_peak()
    side = _side(system, Path(root))
    start = time.perf_counter()
    side.load(data)
    took = time.perf_counter() - start
    peak = _peak(reset)
    side.close()
    out.put((took, max(0, peak - before)))


def load_in_child(system: str, root: Path, rows: int) -> tuple[float, int]:
    """Load ``rows`` rows into a fresh store in a child process: (seconds, peak memory)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_load_child, args=(system, str(root), rows, out))
    child.start()
    result: tuple[float, int] | None = None
    try:
        while result is None and (child.is_alive() or not out.empty()):
            with contextlib.suppress(queue.Empty):
                result = out.get(timeout=1.0)  # a child that dies is noticed within a second
    finally:
        child.join(600)
    if result is None or child.exitcode != 0:
        raise RuntimeError(f"loading {system} with {rows} rows failed ({child.exitcode})")
    return result


# -- the operations ----------------------------------------------------------------------


def _upserts(rows: int, count: int, rng: np.random.Generator, base: int) -> list[pa.Table]:
    """``count`` batches of 5 updates (existing keys) and 5 inserts (new keys)."""
    batches = []
    for i in range(count):
        keys = np.concatenate([rng.integers(0, rows, 5), base + i * 5 + np.arange(5)])
        batches.append(with_values(keys.astype(np.int64), rng))
    return batches


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _turns(order: random.Random) -> list[str]:
    """The systems in the order of one round of cold operations, shuffled (seeded) as
    ``bench.common.time_interleaved`` does: in a fixed order merkle-db always ran right
    after Delta Lake's lookup (14-170 ms of work that leaves the CPU caches cold) and
    Lance always after merkle-db's, so each paid the same neighbour's aftermath."""
    turns = list(SYSTEMS)
    order.shuffle(turns)
    return turns


def _cold(side: Side, fn: Callable[[], Any]) -> float:
    """One operation on a fresh handle; only the operation is timed."""
    side.reopen()
    return _timed(fn)


def measure_size(root: Path, rows: int, plan: Plan) -> Result:
    result = Result(rows)
    sides: dict[str, Side] = {}
    for system in SYSTEMS:
        where = root / f"{system.split()[0].lower()}-{rows}"
        where.mkdir(parents=True)
        os.sync()
        took, peak = load_in_child(system, where, rows)
        result.put("load", system, took)
        result.put("load_mem", system, peak)
        sides[system] = _side(system, where)
        sides[system].reopen()
    lance = sides[LANCE]
    assert isinstance(lance, LanceSide)
    start = time.perf_counter()
    lance.index()
    result.notes.append(
        f"Lance's BTREE index on the key took {fmt_duration(time.perf_counter() - start)} "
        "to build after the load (not counted in the load)."
    )
    rng = np.random.default_rng(SEED + rows)
    order = random.Random(SEED + rows)

    # Cold lookups and scans: a fresh handle each time, the systems taking turns in
    # an order shuffled each round (see _turns).
    for op, repeats, make in (
        ("get1_cold", plan.lookups, lambda: [int(rng.integers(0, rows))]),
        ("get1000_cold", plan.many_rounds, lambda: rng.integers(0, rows, 1000).tolist()),
    ):
        samples: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        for _ in range(repeats):
            keys = make()
            for system in _turns(order):
                side = sides[system]
                samples[system].append(_cold(side, functools.partial(side.get, keys)))
        for system, values in samples.items():
            result.put(op, system, statistics.median(values))
    scan_ops: list[tuple[str, int, Callable[[], int]]] = [
        ("range_cold", plan.scans, lambda: int(rng.integers(0, rows - rows // 100))),
        ("scan_cold", plan.scans, lambda: -1),
    ]
    for op, repeats, low in scan_ops:
        samples = {s: [] for s in SYSTEMS}
        for _ in range(repeats):
            first = low()
            for system in _turns(order):
                side = sides[system]
                fn: Callable[[], Any] = (
                    functools.partial(_scan, side)
                    if first < 0
                    else functools.partial(_range, side, first, rows // 100)
                )
                samples[system].append(_cold(side, fn))
        for system, values in samples.items():
            result.put(op, system, statistics.median(values))

    # Warm lookups: one handle, warmed first.
    for system, side in sides.items():
        side.reopen()
        keys = rng.integers(0, rows, 100 + plan.warm_lookups).tolist()
        for key in keys[:100]:
            side.get([key])
        taken = [_timed(functools.partial(side.get, [key])) for key in keys[100:]]
        result.put("get1_warm", system, statistics.median(taken))

    # Small commits: systems in turn, Delta on fewer (each merge rewrites a data file).
    batches = _upserts(rows, plan.commits, rng, rows)
    taken_by: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    for i, batch in enumerate(batches):
        for system, side in sides.items():
            if system == DELTA and i >= plan.delta_commits:
                continue
            taken_by[system].append(_timed(functools.partial(side.upsert, batch)))
    for system, values in taken_by.items():
        result.put("commit", system, statistics.median(values))

    # GC after 100 small commits (merkle-db and Lance; Delta's vacuum is left out).
    more = _upserts(rows, plan.gc_commits, rng, rows + plan.commits * 5)
    for batch in more:
        sides[MERKLE].upsert(batch)
        lance.upsert(batch)
    merkle_side = sides[MERKLE]
    assert isinstance(merkle_side, MerkleSide)
    merkle_side.reopen()
    conn = merkle_side.conn
    assert conn is not None
    result.put("gc", MERKLE, _timed(lambda: merkle.gc(conn, keep_versions=1, grace="0s")))
    lance.reopen()
    assert lance.ds is not None
    dataset = lance.ds
    result.put("gc", LANCE, _timed(lambda: dataset.cleanup_old_versions(older_than=timedelta(0))))
    for side in sides.values():
        side.close()
    return result


def _scan(side: Side) -> Any:
    if isinstance(side, MerkleSide):
        return side.scan()
    if isinstance(side, LanceSide):
        assert side.ds is not None
        return side.ds.to_table()
    return side.scan()


def _range(side: Side, first: int, count: int) -> Any:
    last = first + count - 1
    if isinstance(side, MerkleSide):
        assert side.db is not None
        return side.db.to_arrow("rows", from_pk=first, to_pk=last)
    if isinstance(side, LanceSide):
        assert side.ds is not None
        return side.ds.to_table(filter=f"id >= {first} AND id <= {last}")
    assert isinstance(side, DeltaSide)
    assert side.qb is not None
    return side.qb.execute(f"SELECT * FROM t WHERE id >= {first} AND id <= {last}").read_all()


# -- reporting ---------------------------------------------------------------------------


def _fmt(op: str, value: float | None, rows: int) -> str:
    if value is None:
        return "-"
    if op == "load_mem":
        return fmt_bytes(int(value))
    if op == "load":
        return f"{fmt_duration(value)} ({value / rows * 1e9:.0f} ns/row)"
    return fmt_duration(value)


def _ratio(figures: dict[str, float]) -> float | None:
    peers = [figures[p] for p in PEERS if p in figures]
    if MERKLE not in figures or not peers or min(peers) <= 0:
        return None
    return figures[MERKLE] / min(peers)


def size_table(result: Result) -> str:
    rows = []
    for op, label in OPS:
        figures = result.figures.get(op, {})
        ratio = _ratio(figures)
        target = TARGETS.get(op)
        verdict = ""
        if target is not None and ratio is not None and result.rows in (1_000_000, 10_000_000):
            verdict = "**met**" if ratio <= target else "**missed**"
        rows.append(
            [
                label,
                *(_fmt(op, figures.get(s), result.rows) for s in SYSTEMS),
                "-" if ratio is None else f"{ratio:.2f}",
                "-" if target is None else f"<= {target:g}",
                verdict,
            ]
        )
    head = ["operation", *SYSTEMS, "merkle-db / best peer", "target", ""]
    return markdown_table(head, rows)


def growth_table(results: Sequence[Result]) -> str:
    """merkle-db's growth from one size to the next, beside log(rows) and rows."""
    if len(results) < 2:
        return ""
    head = ["operation (merkle-db)"]
    for a, b in itertools.pairwise(results):
        head.append(f"{b.rows / 1e6:g}M / {a.rows / 1e6:g}M")
    rows = []
    for op, label in OPS:
        line = [label]
        for a, b in itertools.pairwise(results):
            x, y = a.figures.get(op, {}).get(MERKLE), b.figures.get(op, {}).get(MERKLE)
            line.append("-" if not x or y is None else f"{y / x:.2f}x")
        rows.append(line)
    rows.append(
        [
            "log(rows) grows",
            *(
                f"{math.log(b.rows) / math.log(a.rows):.2f}x"
                for a, b in itertools.pairwise(results)
            ),
        ]
    )
    rows.append(
        [
            "rows grow",
            *(f"{b.rows / a.rows:.0f}x" for a, b in itertools.pairwise(results)),
        ]
    )
    return markdown_table(head, rows)


def _sizes(quick: bool) -> list[int]:
    chosen = os.environ.get("MERKLE_BENCH_SCALE_SIZES")
    if chosen:
        return [int(part) for part in chosen.split(",")]
    return [100_000, 300_000] if quick else [1_000_000, 10_000_000, 30_000_000]


def run(quick: bool) -> str:
    plan = QUICK if quick else FULL
    load_before = os.getloadavg()
    results = []
    with temp_dir("merkle-scale-") as root:
        for rows in _sizes(quick):
            results.append(measure_size(root / str(rows), rows, plan))
    load_after = os.getloadavg()
    parts = [
        "Issue 13's scale curve (`bench/scale.py`): the same table (int64 key shuffled, two "
        "strings, a double, a timestamp) in merkle-db, Lance and Delta Lake on the local "
        "disk, every operation on every store in the same run. *Cold*: a fresh handle per "
        "operation, no in-process cache (the OS page cache is warm for all); *warm*: one "
        "open handle after 100 unmeasured lookups. merkle-db fsyncs every block and entry "
        "before a commit returns; the peers do not fsync on a local disk.",
        f"Load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in load_before)};"
        f" at the end: {', '.join(f'{x:.2f}' for x in load_after)}.",
    ]
    for result in results:
        parts.append(f"**{result.rows:,} rows**")
        parts.append(size_table(result))
        parts.extend(f"- {note}" for note in result.notes)
    growth = growth_table(results)
    if growth:
        parts.append("**Growth of merkle-db's figures from one size to the next**")
        parts.append(growth)
    return "\n\n".join(parts)
