"""Garbage collection beside Delta Lake ``vacuum`` and Lance ``cleanup_old_versions``.

One history, built the same way in all three: a table of ``ROWS`` rows (id,
value, name, rev), then ``COMMITS`` commits that each update 1% of the rows,
chosen at random (the same keys and values for all three; merkle-db commits
a write of the rows, Delta Lake and Lance a ``MERGE`` / ``merge_insert`` on
``id``). Each history is built once; then, in each of ``ROUNDS`` rounds, a
fresh copy of each (``shutil.copytree``, then ``os.sync``) is collected
down to its newest version, the stores taking turns going first:

* merkle-db: ``db.compact().commit()`` once on the history (folding the
  pending batches into the tablets, like Delta's compaction; timed apart),
  then ``merkle.gc(conn, keep_versions=1, grace="0s")`` on a new connection
  (connecting included; the writer's connection was closed, so no writer
  lease is live and the collector does not wait);
* Delta Lake: ``optimize.compact()`` and ``create_checkpoint()`` once on
  the history (the maintenance its docs recommend before vacuuming; timed
  apart), then ``vacuum(retention_hours=0, enforce_retention_duration=False,
  dry_run=False)``;
* Lance: ``cleanup_old_versions(older_than=timedelta(0))``.

Reported: the median time of that call, what it freed and the files and
bytes left in the directory (everything: data, logs, journals). Targets:
merkle-db's GC time at most 1.0x the faster peer's, bytes left at most 1.0x
the smaller peer's. When the time target is missed, one more collection is
profiled: every object store call counted and timed, plus cProfile.

Mark cost: marking walks DAG-CBOR nodes only (raw Arrow segments are leaves,
never fetched), and a subtree already marked is skipped, so marking many
versions costs the nodes that differ between them. Shown at 1M and 10M rows
with the same changes (``MARK_COMMITS`` commits of ``MARK_CHANGE`` rows
each, a contiguous key range at a random offset, so each flush touches one or
two tablets): nodes read and mark seconds, for the head alone and for every
version. Also the random 1% history above (where each flush touches every
tablet).

Run: ``python -m bench gc [--quick]``.
"""

from __future__ import annotations

import contextlib
import cProfile
import io
import os
import pstats
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import merkle
from bench.common import fmt_bytes, fmt_duration, markdown_table, temp_dir

__all__ = ["run"]

ROWS = 1_000_000
COMMITS = 100
FRACTION = 0.01
MARK_ROWS = (1_000_000, 10_000_000)
MARK_COMMITS = 20
MARK_CHANGE = 10_000
ROUNDS = 3
SEED = 20240601


# -- data ------------------------------------------------------------------------


def _names(ids: pa.Array, rev: int) -> pa.Array:
    """A string column derived from the ids (about 16 bytes a row)."""
    return pc.binary_join_element_wise(f"user-{rev:03d}-", pc.cast(ids, pa.string()), "")


def base_table(rows: int) -> pa.Table:
    """The initial table: ids 0..rows-1, a random value, a name, revision 0."""
    rng = np.random.default_rng(SEED)
    ids = pa.array(np.arange(rows, dtype=np.int64))
    return pa.table(
        {
            "id": ids,
            "value": pa.array(rng.random(rows)),
            "name": _names(ids, 0),
            "rev": pa.array(np.zeros(rows, dtype=np.int64)),
        }
    )


def random_updates(rows: int, commits: int, fraction: float) -> list[pa.Table]:
    """``commits`` update batches, each ``fraction`` of the rows at random keys (sorted)."""
    rng = np.random.default_rng(SEED + 1)
    per = max(1, int(rows * fraction))
    out = []
    for i in range(commits):
        keys = np.sort(rng.choice(rows, per, replace=False)).astype(np.int64)
        out.append(_update(keys, i + 1, rng))
    return out


def clustered_updates(rows: int, commits: int, change: int) -> list[pa.Table]:
    """``commits`` update batches of ``change`` consecutive keys at random offsets."""
    rng = np.random.default_rng(SEED + 2)
    out = []
    for i in range(commits):
        start = int(rng.integers(0, rows - change))
        out.append(_update(np.arange(start, start + change, dtype=np.int64), i + 1, rng))
    return out


def _update(keys: np.ndarray, rev: int, rng: np.random.Generator) -> pa.Table:
    ids = pa.array(keys)
    return pa.table(
        {
            "id": ids,
            "value": pa.array(rng.random(len(keys))),
            "name": _names(ids, rev),
            "rev": pa.array(np.full(len(keys), rev, dtype=np.int64)),
        }
    )


# -- measuring -------------------------------------------------------------------


def dir_usage(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``: every regular file, whatever it holds."""
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                size += os.stat(os.path.join(root, name)).st_size
                files += 1
    return files, size


@dataclass
class Outcome:
    """One store's history and its collections (one per round, each on a fresh copy)."""

    store: str
    build_seconds: float
    maintenance_seconds: float | None = None
    gc_seconds: list[float] = field(default_factory=list)
    freed_objects: int = 0
    freed_bytes: int = 0
    before: tuple[int, int] = (0, 0)
    after: tuple[int, int] = (0, 0)
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def gc_median(self) -> float:
        return statistics.median(self.gc_seconds)


# -- the three stores: build a history once, collect on copies --------------------


def merkle_history(path: Path, base: pa.Table, updates: list[pa.Table], **limits: Any) -> float:
    """Load ``base`` and commit each update; seconds taken. The connection is closed after."""
    start = time.perf_counter()
    with merkle.connect(path.as_uri()) as conn:
        db = conn.create_db("bench")
        db = db.create_table("t", key="id", key_codec="int", **limits).write("t", base).commit()
        for batch in updates:
            db = db.write("t", batch).commit()
    return time.perf_counter() - start


def merkle_compacted_history(path: Path, base: pa.Table, updates: list[pa.Table]) -> Outcome:
    """The history, then one compaction (timed apart, as maintenance)."""
    outcome = Outcome("merkle-db", merkle_history(path, base, updates))
    start = time.perf_counter()
    with merkle.connect(path.as_uri()) as conn:
        conn.open_db("bench").compact().commit(message="compact")
    outcome.maintenance_seconds = time.perf_counter() - start
    return outcome


def merkle_gc(path: Path, rows: int, outcome: Outcome) -> None:
    """Collect a copy of the merkle-db history (connecting included in the time)."""
    start = time.perf_counter()
    with merkle.connect(path.as_uri()) as conn:
        report = merkle.gc(conn, keep_versions=1, grace="0s")
    outcome.gc_seconds.append(time.perf_counter() - start)
    with merkle.connect(path.as_uri()) as conn:
        count = conn.open_db("bench").describe_table("t")["count"]
    if count != rows:
        raise AssertionError(f"merkle-db head holds {count} rows after GC, not {rows}")
    outcome.freed_objects, outcome.freed_bytes = report.blocks_freed, report.bytes_freed
    outcome.notes.setdefault("phases", []).append(dict(report.phases))
    outcome.notes.update(
        nodes_read=report.nodes_read,
        blocks_listed=report.blocks_listed,
        blocks_kept=report.blocks_kept,
        versions_trimmed=report.databases["bench"].versions_trimmed,
    )


#: Object store calls counted by the profile (nested ones, e.g. put_many -> put, too).
_STORE_CALLS = (
    "get",
    "stat",
    "list",
    "list_prefixes",
    "put",
    "put_many",
    "put_if_absent",
    "delete",
    "delete_many",
    "exists",
)


def merkle_profile(path: Path) -> tuple[str, str]:
    """Profile one collection of a copy: (object store calls, cProfile of the main thread).

    cProfile sees only the calling thread, and the store runs bulk calls on a
    thread pool, so every store call is also counted and timed by wrapping
    the store's methods (busy time summed over threads).
    """
    calls: dict[str, list[float]] = {}
    guard = threading.Lock()
    with merkle.connect(path.as_uri()) as conn:
        store = conn.store
        for name in _STORE_CALLS:
            real = getattr(store, name)

            def timed(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    result = _real(*args, **kwargs)
                    if _name == "list":
                        result = list(result)  # a generator: time the listing itself
                    return result
                finally:
                    took = time.perf_counter() - start
                    with guard:
                        entry = calls.setdefault(_name, [0, 0.0])
                        entry[0] += 1
                        entry[1] += took

            setattr(store, name, timed)
        profiler = cProfile.Profile()
        profiler.runcall(lambda: merkle.gc(conn, keep_versions=1, grace="0s"))
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(18)
    table = markdown_table(
        ["store call", "calls", "busy time (all threads)", "per call"],
        [
            (name, f"{int(n):,}", fmt_duration(t), fmt_duration(t / n))
            for name, (n, t) in sorted(calls.items(), key=lambda kv: -kv[1][1])
        ],
    )
    return table, out.getvalue()


def delta_history(path: Path, base: pa.Table, updates: list[pa.Table]) -> Outcome:
    """Write, merge each update, then compact and checkpoint (timed apart)."""
    from deltalake import DeltaTable, write_deltalake

    start = time.perf_counter()
    write_deltalake(str(path), base)
    for batch in updates:
        (
            DeltaTable(str(path))
            .merge(source=batch, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .execute()
        )
    outcome = Outcome("Delta Lake", time.perf_counter() - start)
    start = time.perf_counter()
    dt = DeltaTable(str(path))
    dt.optimize.compact()
    dt.create_checkpoint()
    outcome.maintenance_seconds = time.perf_counter() - start
    return outcome


def delta_gc(path: Path, rows: int, outcome: Outcome) -> None:
    from deltalake import DeltaTable

    start = time.perf_counter()
    removed = DeltaTable(str(path)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=False
    )
    outcome.gc_seconds.append(time.perf_counter() - start)
    count = DeltaTable(str(path)).to_pyarrow_table(columns=["id"]).num_rows
    if count != rows:
        raise AssertionError(f"Delta table holds {count} rows after vacuum, not {rows}")
    outcome.freed_objects = len(removed)
    outcome.freed_bytes = outcome.before[1] - dir_usage(path)[1]
    outcome.notes["log_files"], outcome.notes["log_bytes"] = dir_usage(path / "_delta_log")


def lance_history(path: Path, base: pa.Table, updates: list[pa.Table]) -> Outcome:
    import lance

    start = time.perf_counter()
    lance.write_dataset(base, str(path))
    for batch in updates:
        lance.dataset(str(path)).merge_insert("id").when_matched_update_all().execute(batch)
    return Outcome("Lance", time.perf_counter() - start)


def lance_gc(path: Path, rows: int, outcome: Outcome) -> None:
    import lance

    start = time.perf_counter()
    stats = lance.dataset(str(path)).cleanup_old_versions(older_than=timedelta(0))
    outcome.gc_seconds.append(time.perf_counter() - start)
    count = lance.dataset(str(path)).count_rows()
    if count != rows:
        raise AssertionError(f"Lance dataset holds {count} rows after cleanup, not {rows}")
    outcome.freed_objects = (
        stats.old_versions
        + stats.data_files_removed
        + stats.deletion_files_removed
        + stats.transaction_files_removed
        + stats.index_files_removed
    )
    outcome.freed_bytes = stats.bytes_removed


# -- mark cost -------------------------------------------------------------------


@dataclass
class MarkResult:
    rows: int
    workload: str
    versions: int
    tablets: int
    table_bytes: int
    head_nodes: int
    head_seconds: float
    all_nodes: int
    all_blocks: int
    all_seconds: float


def measure_mark(path: Path, rows: int, workload: str) -> MarkResult:
    """Mark the head alone, then every version: dry runs, each on a new (cold) connection."""
    with merkle.connect(path.as_uri()) as conn:
        tablets = conn.open_db("bench").describe_table("t")["tablets"]
        versions = len(conn.history("bench"))
    with merkle.connect(path.as_uri()) as conn:
        head_report = merkle.gc(conn, dry_run=True, keep_versions=1, grace="0s")
    with merkle.connect(path.as_uri()) as conn:
        all_report = merkle.gc(conn, dry_run=True, grace="0s")  # the default keeps every version
    return MarkResult(
        rows=rows,
        workload=workload,
        versions=versions,
        tablets=tablets,
        table_bytes=dir_usage(path / "blocks")[1],
        head_nodes=head_report.nodes_read,
        head_seconds=head_report.phases["mark"],
        all_nodes=all_report.nodes_read,
        all_blocks=all_report.blocks_kept,
        all_seconds=all_report.phases["mark"],
    )


# -- report ----------------------------------------------------------------------


def _ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}x" if theirs > 0 else "n/a"


def _comparison(outcomes: list[Outcome]) -> str:
    rows = []
    for o in outcomes:
        rows.append(
            (
                o.store,
                fmt_duration(o.build_seconds),
                fmt_duration(o.maintenance_seconds) if o.maintenance_seconds is not None else "-",
                f"**{fmt_duration(o.gc_median)}**",
                " / ".join(fmt_duration(t) for t in o.gc_seconds),
                f"{o.freed_objects:,}",
                fmt_bytes(o.freed_bytes),
                f"{o.before[0]:,} / {fmt_bytes(o.before[1])}",
                f"{o.after[0]:,} / {fmt_bytes(o.after[1])}",
            )
        )
    return markdown_table(
        [
            "store",
            "history (load + commits)",
            "maintenance before GC",
            "GC call (median)",
            "each round",
            "objects freed",
            "bytes freed",
            "files / bytes before",
            "files / bytes left",
        ],
        rows,
    )


def _mark_table(results: list[MarkResult]) -> str:
    rows = []
    for r in results:
        per_node = r.all_seconds / r.all_nodes if r.all_nodes else 0.0
        rows.append(
            (
                f"{r.rows:,}",
                r.workload,
                r.tablets,
                fmt_bytes(r.table_bytes),
                f"{r.head_nodes:,}",
                fmt_duration(r.head_seconds),
                r.versions,
                f"{r.all_nodes:,}",
                f"{r.all_nodes - r.head_nodes:,}",
                fmt_duration(r.all_seconds),
                fmt_duration(per_node),
            )
        )
    return markdown_table(
        [
            "rows",
            "history",
            "tablets (head)",
            "block bytes",
            "nodes read: head",
            "mark: head",
            "versions",
            "nodes read: all versions",
            "of which not in head",
            "mark: all versions",
            "per node",
        ],
        rows,
    )


def _median_phases(samples: list[dict[str, float]]) -> dict[str, float]:
    names = list(dict.fromkeys(name for sample in samples for name in sample))
    return {name: statistics.median(s.get(name, 0.0) for s in samples) for name in names}


def run(quick: bool) -> str:
    """Build the histories, collect copies of them round by round, measure marking."""
    rows = 50_000 if quick else ROWS
    commits = 10 if quick else COMMITS
    rounds = 2 if quick else ROUNDS
    mark_rows = (50_000, 500_000) if quick else MARK_ROWS
    mark_commits = 5 if quick else MARK_COMMITS
    mark_change = 1_000 if quick else MARK_CHANGE

    base = base_table(rows)
    updates = random_updates(rows, commits, FRACTION)
    marks: list[MarkResult] = []
    with temp_dir("merkle-bench-gc-") as scratch:
        masters = scratch / "masters"
        masters.mkdir()
        outcomes = {
            "merkle": merkle_compacted_history(masters / "merkle", base, updates),
            "delta": delta_history(masters / "delta", base, updates),
            "lance": lance_history(masters / "lance", base, updates),
        }
        collectors: dict[str, Callable[[Path, int, Outcome], None]] = {
            "merkle": merkle_gc,
            "delta": delta_gc,
            "lance": lance_gc,
        }
        names = list(outcomes)
        for r in range(rounds):
            for turn in range(len(names)):  # a different store goes first each round
                name = names[(r + turn) % len(names)]
                copy = scratch / f"round-{r}-{name}"
                shutil.copytree(masters / name, copy)
                os.sync()  # no writeback of the copy during the timed call
                outcomes[name].before = dir_usage(copy)
                collectors[name](copy, rows, outcomes[name])
                outcomes[name].after = dir_usage(copy)
                shutil.rmtree(copy)
        copy = scratch / "profiled"
        shutil.copytree(masters / "merkle", copy)
        os.sync()
        profile = merkle_profile(copy)
        shutil.rmtree(copy)
        marks.append(measure_mark(masters / "merkle", rows, f"{commits} x 1% random keys"))
        shutil.rmtree(masters)
        for n in mark_rows:
            path = scratch / f"mark-{n}"
            merkle_history(path, base_table(n), clustered_updates(n, mark_commits, mark_change))
            marks.append(
                measure_mark(path, n, f"{mark_commits} x {mark_change:,} consecutive keys")
            )
            shutil.rmtree(path)
    return _section(rows, commits, rounds, list(outcomes.values()), marks, profile)


def _section(
    rows: int,
    commits: int,
    rounds: int,
    outcomes: list[Outcome],
    marks: list[MarkResult],
    profile: tuple[str, str],
) -> str:
    mine, peers = outcomes[0], outcomes[1:]
    fastest = min(peers, key=lambda o: o.gc_median)
    smallest = min(peers, key=lambda o: o.after[1])
    phases = _median_phases(mine.notes["phases"])
    time_met = mine.gc_median <= fastest.gc_median
    bytes_met = mine.after[1] <= smallest.after[1]
    delta = next((o for o in peers if "log_files" in o.notes), None)
    parts = [
        f"History: a table of {rows:,} rows (id int64, value float64, name string, rev "
        f"int64), then {commits} commits each updating {FRACTION:.0%} of the rows at random "
        "keys; the same data for all three stores, on the same disk, in the same run. Each "
        "history is built once; then, in each of "
        f"{rounds} rounds, a fresh copy of each is collected down to its newest version "
        "(the stores take turns going first). Calls: `merkle.gc(conn, keep_versions=1, "
        'grace="0s")` on a new connection (connecting included; no writer lease is live) '
        "after `db.compact().commit()` (folds the pending batches into tablets; timed apart, "
        "as maintenance), Delta "
        "`vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)` "
        "after `optimize.compact()` and `create_checkpoint()` (timed apart, as maintenance), "
        "Lance `cleanup_old_versions(older_than=timedelta(0))`. Objects freed: blocks "
        "(merkle-db), files (Delta), versions plus files (Lance).",
        _comparison(outcomes),
        markdown_table(
            ["target", "merkle-db", "best peer", "ratio", "met"],
            [
                (
                    "GC time <= 1.0x the faster peer",
                    fmt_duration(mine.gc_median),
                    f"{fastest.store} {fmt_duration(fastest.gc_median)}",
                    _ratio(mine.gc_median, fastest.gc_median),
                    "yes" if time_met else "**no**",
                ),
                (
                    "bytes left <= 1.0x the smaller peer",
                    fmt_bytes(mine.after[1]),
                    f"{smallest.store} {fmt_bytes(smallest.after[1])}",
                    _ratio(mine.after[1], smallest.after[1]),
                    "yes" if bytes_met else "**no**",
                ),
            ],
        ),
        "merkle-db GC phases (median of the rounds): "
        + ", ".join(f"{k} {fmt_duration(v)}" for k, v in phases.items())
        + f". {mine.notes['blocks_listed']:,} blocks listed, {mine.notes['blocks_kept']:,} "
        f"kept, {mine.notes['nodes_read']:,} nodes read to mark, "
        f"{mine.notes['versions_trimmed']} journal entries trimmed (each replaced by a "
        "durable tombstone)."
        + (
            f" Delta's `_delta_log` still holds {delta.notes['log_files']:,} files "
            f"({fmt_bytes(delta.notes['log_bytes'])}) after vacuum, which does not touch the log."
            if delta is not None
            else ""
        ),
    ]
    if not time_met:
        store_calls, cprofile = profile
        parts.append(
            "GC time target missed. Profile of one more collection of a copy: every object "
            "store call, counted and timed (bulk calls run on the store's thread pool, so "
            "busy time can exceed wall time), then cProfile of the calling thread by "
            "cumulative time:"
        )
        parts.append(store_calls)
        parts.append("```\n" + _trim_profile(cprofile) + "\n```")
    parts += [
        "Mark cost (dry runs, each on a new connection, so every node comes from disk): the "
        "head alone (`keep_versions=1`) and every version (the default policy keeps all). "
        "Only DAG-CBOR nodes are read; the Arrow segments (almost all the bytes) are leaves "
        "that are never fetched.",
        _mark_table(marks),
    ]
    clustered = [m for m in marks if "consecutive" in m.workload]
    if len(clustered) >= 2:
        small, large = clustered[0], clustered[-1]
        parts.append(
            f"With the same changes, marking every version reads "
            f"{small.all_nodes - small.head_nodes:,} nodes beyond the head at {small.rows:,} "
            f"rows and {large.all_nodes - large.head_nodes:,} at {large.rows:,} "
            f"({large.rows / small.rows:.0f}x the rows): history costs the nodes that "
            "changed, not the size of the table. The head alone grows with the number "
            f"of tablets (one node each, plus the roots and the index: {small.head_nodes:,} vs "
            f"{large.head_nodes:,} nodes), never with the bytes of the data."
        )
    randomly = next((m for m in marks if "random" in m.workload), None)
    if randomly is not None:
        per_version = (randomly.all_nodes - randomly.head_nodes) / max(1, randomly.versions - 1)
        parts.append(
            f"Under random 1% updates every flush rewrites every tablet, so each version adds "
            f"{per_version:.1f} new nodes on average ({randomly.all_nodes:,} for "
            f"{randomly.versions} versions): still nodes, not the "
            f"{fmt_bytes(randomly.table_bytes)} of blocks, which marking never reads."
        )
    return "\n\n".join(parts)


def _trim_profile(text: str) -> str:
    """The table part of a pstats listing, without the header chatter."""
    lines = text.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return "\n".join(line.rstrip() for line in lines[start:])


if __name__ == "__main__":  # pragma: no cover
    print(run(quick=True))
