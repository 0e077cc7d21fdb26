"""``merkle.spark.gc``: the collection of ``merkle.gc``, its bulk work run as Spark tasks.

The protocol (journal audit, retention, reader and writer leases, the GC
lock, fencing, trimming, the re-mark, the grace cutoff, the lock check and
timestamp re-check before every delete) is :func:`merkle.gc.gc` itself;
:class:`SparkFanout` only moves the three steps that grow with the lake onto
the cluster (:mod:`merkle.gc.fanout`):

* marking: the driver walks from the kept roots until a level holds
  ``frontier`` nodes, then each task walks a share of those subtrees and
  returns the CIDs it reached (never data: raw segments are not fetched);
* listing ``blocks/``: on S3, one listing per key prefix (the prefixes of
  the CIDs merkle-db writes, split by their next character, plus every other
  possible start, so nothing is missed), spread over tasks; on other stores
  one task lists;
* deleting: the candidates, in key order, split over tasks; each deletes in
  batches of 1,000, checking before each that the collector's lock
  generation is still held and re-reading every timestamp.

Each phase's cost is in the report (``phases``), as for ``merkle.gc``.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from pyspark.sql import SparkSession

from merkle.blocks.cid import CID, DAG_CBOR
from merkle.blocks.walk import walk_levels
from merkle.db.connection import Connection
from merkle.errors import IntegrityError, NotFoundError
from merkle.gc.collect import Notify
from merkle.gc.collect import gc as collect
from merkle.gc.fanout import (
    DELETE_BATCH,
    Fanout,
    Progress,
    Roots,
    check_generation_held,
    sweep_batch,
)
from merkle.gc.mark import Marker, ReachabilityError
from merkle.gc.report import GCReport
from merkle.refs import GCLock
from merkle.spark.lake import open_lake
from merkle.spark.options import LakeRef, lake_ref
from merkle.storage.base import ObjectInfo

__all__ = ["SparkFanout", "gc", "listing_prefixes"]

_BASE32 = "abcdefghijklmnopqrstuvwxyz234567"
#: CID string starts of the blocks merkle-db writes: dag-cbor or raw, BLAKE3 or SHA2-256.
_OURS = ("bafyr4i", "bafkr4i", "bafyrei", "bafkrei")
_FIRST = [c for c in string.printable[:94] if c not in "/.\\"]  # a key segment's first char


def listing_prefixes() -> list[str]:
    """CID-string prefixes that together cover every block key, in key order.

    Our four CID starts are split by their next base32 character; every
    other start a parseable CID can have (another multibase, another codec
    or hash) gets a prefix of its own, so the listings miss nothing.
    """
    prefixes = [p + c for p in _OURS for c in _BASE32]
    trie = {p[:i] for p in _OURS for i in range(1, len(p))}
    prefixes += [c for c in _FIRST if c != "b"]
    for node in trie:
        for c in _BASE32:
            child = node + c
            if child not in trie and child not in _OURS:
                prefixes.append(child)
    return sorted(prefixes)


def _split(items: Sequence[Any], parts: int) -> list[list[Any]]:
    """``items`` in ``parts`` contiguous runs of nearly equal length."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, at = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        out.append(list(items[at : at + n]))
        at += n
    return out


# -- what tasks run (module-level functions: they pickle by reference) ---------------------


def _mark_task(lake: LakeRef, roots: list[bytes]) -> tuple[list[bytes], int, str | None]:
    """Everything ``roots`` reach (CID bytes), the nodes read, and a read error if any."""
    blocks = open_lake(lake).blocks
    seen: set[bytes] = set()
    nodes = 0
    try:
        for level in walk_levels(blocks, [CID.from_bytes(r) for r in roots], seen):
            nodes += sum(1 for cid in level if cid.codec == DAG_CBOR)
    except (NotFoundError, IntegrityError) as exc:
        return [], nodes, str(exc)
    return list(seen), nodes, None


def _list_task(lake: LakeRef, prefixes: list[str]) -> list[tuple[str, int, float]]:
    blocks = open_lake(lake).blocks
    return [
        (str(cid), info.size, info.mtime)
        for prefix in prefixes
        for cid, info in blocks.list(prefix)
    ]


def _sweep_task(
    lake: LakeRef, generation: int, cutoff: float, recheck: bool, items: list[tuple[str, int]]
) -> list[tuple[str, int]]:
    conn = open_lake(lake)
    timing = conn.leases.timing

    def ensure_held() -> None:
        check_generation_held(conn.store, timing, generation)

    candidates = [(CID.parse(cid), size) for cid, size in items]
    freed: list[tuple[str, int]] = []
    for i in range(0, len(candidates), DELETE_BATCH):
        done = sweep_batch(conn, candidates[i : i + DELETE_BATCH], cutoff, ensure_held, recheck)
        freed += [(str(cid), size) for cid, size in done]
    return freed


class SparkFanout(Fanout):
    """Marks, lists and deletes with Spark tasks (see the module doc)."""

    def __init__(
        self, spark: SparkSession, lake: LakeRef, *, tasks: int | None = None, frontier: int = 64
    ) -> None:
        self.spark = spark
        self.lake = lake
        self.tasks = tasks or max(2, 2 * spark.sparkContext.defaultParallelism)
        self.frontier = frontier
        self.description = f"marking, listing and deleting ran as Spark tasks (up to {self.tasks})"

    def _run(self, fn: Any, chunks: Sequence[Any]) -> list[Any]:
        rdd = self.spark.sparkContext.parallelize(list(chunks), max(1, len(chunks)))
        return rdd.map(fn).collect()

    def mark(self, marker: Marker, roots: Roots) -> int:
        if not roots:
            return 0
        before = len(marker.marked)
        where = roots[0][1] + (f" (and {len(roots) - 1} more)" if len(roots) > 1 else "")
        frontier: list[CID] = []
        try:
            for level in walk_levels(marker.blocks, [cid for cid, _ in roots], marker.marked):
                nodes = [cid for cid in level if cid.codec == DAG_CBOR]
                if len(nodes) >= self.frontier:
                    frontier = nodes  # marked; what lies below them is for the tasks
                    break
                marker.nodes_read += len(nodes)
        except (NotFoundError, IntegrityError) as exc:
            raise _unreachable(str(exc), where) from exc
        if frontier:
            chunks = [[cid.bytes for cid in chunk] for chunk in _split(frontier, self.tasks)]
            lake = self.lake
            for reached, nodes, error in self._run(lambda c: _mark_task(lake, c), chunks):
                if error is not None:
                    raise _unreachable(error, where)
                marker.marked.update(reached)
                marker.nodes_read += nodes
        return len(marker.marked) - before

    def list_blocks(self, conn: Connection) -> list[tuple[CID, ObjectInfo]]:
        prefixes = listing_prefixes() if self.lake.uri.startswith("s3://") else [""]
        lake = self.lake
        found = self._run(lambda p: _list_task(lake, p), _split(prefixes, self.tasks))
        return [
            (CID.parse(cid), ObjectInfo(conn.blocks.key(CID.parse(cid)), size, mtime))
            for part in found
            for cid, size, mtime in part
        ]

    def sweep(
        self,
        conn: Connection,
        candidates: Sequence[tuple[CID, int]],
        cutoff: float,
        lock: GCLock,
        progress: Progress,
        recheck: bool = True,
    ) -> list[tuple[CID, int]]:
        lock.ensure_held()
        items = sorted((str(cid), size) for cid, size in candidates)
        lake, generation = self.lake, lock.generation
        freed = self._run(
            lambda part: _sweep_task(lake, generation, cutoff, recheck, part),
            _split(items, self.tasks),
        )
        progress("sweep", len(candidates), len(candidates))
        return [(CID.parse(cid), size) for part in freed for cid, size in part]


def _unreachable(problem: str, where: str) -> ReachabilityError:
    return ReachabilityError(
        f"{problem} (reachable from {where}); garbage collection stopped before deleting "
        "anything: run `merkle verify` and restore the block"
    )


def gc(
    spark: SparkSession,
    lake: str,
    keep_versions: int | None = None,
    keep_within: timedelta | str | None = None,
    grace: timedelta | str | None = None,
    dry_run: bool = False,
    *,
    tasks: int | None = None,
    frontier: int = 64,
    progress: Progress | None = None,
    notify: Notify | None = None,
    **options: Any,
) -> GCReport:
    """``merkle.gc`` on the lake at ``lake``, its marking, listing and deleting on Spark.

    Same arguments and report as :func:`merkle.gc` (``options``: store
    options such as ``endpoint_url``; ``progress`` and ``notify`` as there);
    ``tasks`` bounds the tasks of each step, ``frontier`` is how many nodes
    one level must hold before marking fans out.
    """
    ref = lake_ref(lake, options)
    conn = open_lake(ref)
    fanout = SparkFanout(spark, ref, tasks=tasks, frontier=frontier)
    return collect(
        conn,
        dry_run=dry_run,
        keep_versions=keep_versions,
        keep_within=keep_within,
        grace=grace,
        progress=progress,
        notify=notify,
        fanout=fanout,
    )
