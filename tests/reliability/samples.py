"""Valid stored objects of every kind, from a real lake, for the decoder fuzz tests to damage.

:func:`sample_lake` builds a small lake in memory (four tables with int,
tuple, string and composite keys, typed and schema-free fields, a second
column family, pending batches and deletes, a clone, a reader lease, a GC
lock, a policy, a GC report, a tag and a CAR
export) and returns it
with the raw bytes of each kind of object and every block the head reaches.
:func:`relink` re-stores a damaged block under its own CID and rewrites the
path of nodes above it up to a new database root, so a reader reaches the
damage the way it would reach a block someone crafted.
"""

from __future__ import annotations

import datetime
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import merkle
from merkle.blocks.cid import CID, DAG_CBOR
from merkle.blocks.codec import decode_node, encode_node, iter_links
from merkle.db.connection import Connection
from merkle.gc import set_retention
from merkle.refs.gclock import read_lock
from merkle.storage import open_store
from merkle.transfer.car import export_car

__all__ = ["Sample", "read_everything", "relink", "replace_links", "sample_lake"]

DB = "shop"


@dataclass
class Sample:
    """A lake and the raw bytes of its objects, by kind."""

    conn: Connection
    root: CID  # the head's database root
    blocks: dict[CID, bytes]  # every block the head reaches
    parent: dict[CID, CID]  # a parent of every block but the root, on a path to the root
    objects: dict[str, list[tuple[str, bytes]]] = field(
        default_factory=dict
    )  # kind -> (key, bytes)

    def nodes(self, node_type: str) -> list[bytes]:
        """The DAG-CBOR blocks whose ``type`` is ``node_type``."""
        return [
            data
            for cid, data in self.blocks.items()
            if cid.codec == DAG_CBOR and decode_node(data).get("type") == node_type
        ]

    def raw_blocks(self) -> list[bytes]:
        return [data for cid, data in self.blocks.items() if cid.codec != DAG_CBOR]


def _build(conn: Connection) -> None:
    limits: dict[str, Any] = {"tablet_size_limit": 4, "branching_factor": 3, "patch_limit": 40}
    db = conn.create_db(DB, metadata={"owner": "ops", "tags": ["a", "b"]})
    db = db.create_table("t", key="id", families={"extra": ["n"]}, **limits)
    db = db.create_table(
        "pairs", key="k", key_codec="tuple(str,reverse(int))", schema_free=["x"], **limits
    )
    db = db.create_table("words", key="w", schema_free=True, **limits)
    db = db.create_table("points", key=["x", "y"], **limits)
    when = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC)
    db = db.write("t", [{"id": i, "v": f"v{i}", "n": i * 1.5, "at": when} for i in range(30)])
    db = db.write("pairs", [{"k": (f"p{i % 3}", i), "x": [i, {"y": None}]} for i in range(12)])
    db = db.write("words", [{"w": w, "len": len(w)} for w in ("ant", "bee", "cat", "dog", "eel")])
    db = db.write("points", [{"x": i % 4, "y": f"y{i}", "z": i / 3} for i in range(10)])
    db = db.compact().commit(message="load")
    db = db.write("t", [{"id": i, "v": f"w{i}"} for i in range(28, 34)]).delete("t", [3, 4])
    db = db.delete("words", ["cat"]).commit(message="change")
    conn.create_db("copy", root=db)


def sample_lake() -> Sample:
    """A fresh sample (see the module doc); about 0.3 s."""
    conn = Connection(open_store("memory://"), workers=1)
    _build(conn)
    head = conn.refs.head(DB)
    assert head is not None
    assert head.root is not None
    root = CID.parse(head.root)
    blocks: dict[CID, bytes] = {}
    parent: dict[CID, CID] = {}
    frontier = [root]
    while frontier:
        cid = frontier.pop()
        if cid in blocks:
            continue
        blocks[cid] = data = conn.blocks.get(cid)
        if cid.codec == DAG_CBOR:
            for link in iter_links(decode_node(data)):
                parent.setdefault(link, cid)
                frontier.append(link)
    sample = Sample(conn, root, blocks, parent)
    store = conn.store
    with conn.open_db(DB, version=1, lease=True):
        sample.objects["lease"] = _raw(store, "leases/")
    merkle.gc(conn, grace=datetime.timedelta(hours=1), writer_wait=0.0)
    set_retention(conn, keep_versions=5, db="copy", grace="2h")
    lock = conn.leases.acquire_gc_lock(60.0)
    state = read_lock(store)
    assert state is not None
    sample.objects["gc lock"] = _raw(store, "gc/lock/")
    lock.release()
    sample.objects["journal entry"] = _raw(store, f"refs/{DB}/0")
    sample.objects["policy"] = _raw(store, "gc/policy")
    sample.objects["report"] = _raw(store, "gc/reports/")
    sample.objects["lake config"] = _raw(store, "config")
    conn.tag(DB, "release-1", version=1, message="first")
    sample.objects["tag"] = _raw(store, "tags/")
    car = io.BytesIO()
    export_car(conn, DB, car)
    sample.objects["car"] = [("shop.car", car.getvalue())]
    return sample


def _raw(store: Any, prefix: str) -> list[tuple[str, bytes]]:
    found = [(info.key, store.get(info.key)) for info in store.list(prefix)]
    assert found, f"the sample lake has no object under {prefix!r}"
    return found


def replace_links(node: Any, old: CID, new: CID) -> Any:
    """``node`` with every link to ``old`` pointing to ``new`` instead."""
    if isinstance(node, CID):
        return new if node == old else node
    if isinstance(node, dict):
        return {key: replace_links(value, old, new) for key, value in node.items()}
    if isinstance(node, list):
        return [replace_links(item, old, new) for item in node]
    return node


def relink(sample: Sample, target: CID, damaged: bytes) -> CID:
    """Store ``damaged`` in place of ``target`` and rewrite the path above it; the new root."""
    store = sample.conn.blocks
    new = store.put(damaged, target.codec)
    old = target
    while old != sample.root:
        above = sample.parent[old]
        node = replace_links(decode_node(sample.blocks[above]), old, new)
        old, new = above, store.put(encode_node(node), DAG_CBOR)
    return new


def read_everything(db: merkle.Database) -> Iterator[Any]:
    """Every way of reading a database version, lazily (the caller drives it)."""
    yield db.describe()
    yield db.metadata
    for name in db.list_tables():
        yield db.describe_table(name)
        yield list(db.scan(name))
        yield list(db.scan(name, reverse=True, limit=5))
        yield db.to_arrow(name)
        tablets = db.list_tablets(name)
        yield tablets
        for tablet in tablets[:2]:
            yield list(db.read_tablet(tablet["id"]))
        keys = [record[next(iter(record))] for record in db.scan(name, limit=3)]
        yield db.get_records(name, keys)
