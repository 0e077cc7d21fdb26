"""Helpers of the garbage collection tests: lakes, block sets, reachability, clocks.

``tests/gc/`` holds no ``__init__.py``: a package named ``gc`` would be
shadowed by Python's built-in ``gc`` module under pytest's default import
mode, so these modules are imported by their own (unique) names.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from aging import backdate, settle

import merkle
from merkle.blocks.cid import CID, DAG_CBOR
from merkle.blocks.codec import decode_node, iter_links
from merkle.blocks.store import BLOCK_PREFIX
from merkle.errors import NotFoundError
from merkle.gc import journal_names
from merkle.storage import ObjectStore

__all__ = [
    "FakeClock",
    "backdate",
    "block_keys",
    "connect",
    "dump",
    "missing_blocks",
    "objects",
    "reachable",
    "reachable_from_journals",
    "settle",
]


def connect(lake: Any, **kwargs: Any) -> merkle.Connection:
    """A new connection to a test lake (``conftest.Lake``)."""
    return merkle.connect(lake.uri, **lake.options, **kwargs)


def block_keys(store: ObjectStore) -> set[str]:
    """The CID strings of every block stored in the lake."""
    return {info.key[len(BLOCK_PREFIX) :] for info in store.list(BLOCK_PREFIX)}


def objects(store: ObjectStore) -> dict[str, bytes]:
    """Every object of the lake with its bytes (blocks included): the whole lake."""
    return {info.key: store.get(info.key) for info in store.list("")}


def reachable(store: ObjectStore, roots: Iterable[str]) -> set[str]:
    """CID strings of every block reachable from ``roots`` by tag-42 links.

    Reads straight from the object store (no cache, no merkle-db GC code),
    so it is an independent account of what a version needs. A block that
    is missing is still counted (it is needed) and not descended into.
    """
    seen: set[str] = set()
    stack = [str(CID.parse(root)) for root in roots]
    while stack:
        text = stack.pop()
        if text in seen:
            continue
        seen.add(text)
        cid = CID.parse(text)
        if cid.codec != DAG_CBOR:
            continue
        try:
            data = store.get(BLOCK_PREFIX + text)
        except NotFoundError:
            continue
        stack.extend(str(link) for link in iter_links(decode_node(data)))
    return seen


def missing_blocks(store: ObjectStore, root: str) -> list[str]:
    """Blocks reachable from ``root`` that are absent or do not match their CID."""
    bad = []
    for text in sorted(reachable(store, [root])):
        try:
            CID.parse(text).verify(store.get(BLOCK_PREFIX + text))
        except Exception:
            bad.append(text)
    return bad


def reachable_from_journals(conn: merkle.Connection) -> set[str]:
    """Every block that some journal entry still in any journal reaches."""
    roots = [
        entry.root
        for name in journal_names(conn)
        for entry in conn.refs.history(name)
        if entry.root is not None
    ]
    return reachable(conn.store, roots)


def dump(db: merkle.Database) -> dict[str, tuple[pa.Table, list[dict[str, Any]]]]:
    """Every table of ``db`` as Arrow and as a full scan: what "byte-identical" compares."""
    return {name: (db.to_arrow(name), list(db.scan(name))) for name in db.list_tables()}


def same_dump(
    a: Mapping[str, tuple[pa.Table, list[dict[str, Any]]]],
    b: Mapping[str, tuple[pa.Table, list[dict[str, Any]]]],
) -> bool:
    """Whether two dumps hold the same tables, equal Arrow data and equal scans."""
    if sorted(a) != sorted(b):
        return False
    return all(a[n][0].equals(b[n][0]) and a[n][1] == b[n][1] for n in a)


@dataclass
class FakeClock:
    """A wall clock the test moves by hand (epoch seconds); ``sleep`` advances it."""

    now: float

    @classmethod
    def real(cls, offset: float = 0.0) -> FakeClock:
        return cls(time.time() + offset)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def build_history(
    conn: merkle.Connection, name: str = "shop", commits: int = 5, rows: int = 40
) -> list[merkle.Database]:
    """A database with ``commits + 2`` versions; the committed value of each, oldest first.

    Version 0 is empty, version 1 creates two tables (small limits, so
    tablets split and pending batches flush into them), and each later
    commit updates, inserts and deletes records of both tables.
    """
    db = conn.create_db(name)
    versions = [db]
    db = db.create_table(
        "orders", key="id", tablet_size_limit=8, branching_factor=4, patch_limit=4
    ).create_table("notes", key="k", key_codec="str", patch_limit=2)
    db = db.write("orders", [{"id": i, "qty": i, "sku": f"s{i:03d}"} for i in range(rows)])
    db = db.write("notes", [{"k": f"n{i}", "text": "x" * i} for i in range(rows // 4)])
    versions.append(db.commit(message="load"))
    for c in range(commits):
        db = versions[-1]
        changed = [{"id": i, "qty": 1000 * (c + 1) + i, "sku": f"v{c}"} for i in range(c, rows, 5)]
        db = db.write("orders", changed).delete("orders", [3 * c + 1, rows + c])
        db = db.write("orders", [{"id": rows + c, "qty": -c}])
        db = db.write("notes", [{"k": f"n{c}", "text": f"edited {c}"}])
        db = db.delete("notes", [f"n{c + 5}"])
        versions.append(db.commit(message=f"change {c}"))
    return versions
