"""A closed connection is freed the moment its last reference goes, not at the next
garbage collection.

The objects behind a connection (stores, caches of decoded blocks, up to
``cache_bytes``) must form no reference cycle: a cycle keeps everything it
reaches alive until Python's cycle collector runs, so the memory of a closed
connection lingered, and the collection that finally freed it ran inside some
later, unrelated read (a point lookup on a fresh connection in a 10M-row table
paid ~0.2 ms for it). Found in a recursive closure (``Tree.locate``) and in the
cached overlay of pending changes, which held a method of the table that read
through the cache holding it.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Lake

import merkle


def _rows(n: int, tag: str = "") -> list[dict[str, Any]]:
    return [{"id": i, "v": f"{tag}{i}", "qty": i % 7} for i in range(n)]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A table with several tablets under two index levels, pending batches with
    upserts, deletes and field patches, and a clone."""
    uri = Path(tmp_path_factory.mktemp("cycles")).as_uri()
    with merkle.connect(uri) as conn:
        db = conn.create_db("shop").create_table(
            "t", key="id", tablet_size_limit=16, branching_factor=3, patch_limit=10_000
        )
        db = db.write("t", _rows(400)).commit().compact().commit()
        db = db.write("t", _rows(30, "new")).delete("t", [5, 6]).commit()
        db = db.update("t", {k: {"qty": 100} for k in range(100, 140)}).commit()
        conn.create_db("copy", root=db)
    return uri


OPS: dict[str, Callable[[merkle.Connection], Any]] = {
    "get_records": lambda c: c.open_db("shop").get_records("t", [5, 7, 120, 399]),
    "get_arrow": lambda c: c.open_db("shop").get_arrow("t", [7, 120, 3000]),
    "to_arrow": lambda c: c.open_db("shop").to_arrow("t"),
    "scan_range": lambda c: list(c.open_db("shop").scan("t", from_pk=50, to_pk=260)),
    "scan_window": lambda c: list(c.open_db("shop").scan("t", offset=100, limit=40)),
    "time_travel": lambda c: c.open_db("shop", version=1).to_arrow("t"),
    "history": lambda c: c.history("shop"),
    "describe": lambda c: c.open_db("shop").describe_table("t"),
    "diff": lambda c: c.open_db("shop").diff(1, "t"),
    "list_tablets": lambda c: c.open_db("shop").list_tablets("t"),
    "write_commit": lambda c: c.open_db("shop").write("t", _rows(3, "w")).commit(),
    "update_commit": lambda c: c.open_db("shop").update("t", {9: {"qty": 1}}).commit(),
    "delete_commit": lambda c: c.open_db("shop").delete("t", [11]).commit(),
    "compact": lambda c: c.open_db("shop").compact().commit(),
    "clone_read": lambda c: c.open_db("copy").get_arrow("t", [7, 120]),
    "clone": lambda c: c.create_db("copy2", root=c.open_db("shop")),
    "tag": lambda c: c.tag("shop", "t1"),
    "merge": lambda c: c.merge(c.open_db("copy").write("t", _rows(2, "m")).commit(), "shop"),
    "leased_read": lambda c: c.open_db("shop", lease=True).get_arrow("t", [7]),
    "gc": lambda c: merkle.gc(c),
    "verify": lambda c: merkle.verify(c),
}


@pytest.fixture
def no_collector() -> Iterator[None]:
    """The cycle collector off, everything collectable collected first."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _cycles_left() -> Counter[str]:
    """merkle's objects that only the cycle collector can free (collected now)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        # merkle's own objects only: a failed test before this one leaves pytest's
        # traceback frames to the collector, which is not this test's business.
        ours = Counter(
            type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("merkle")
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return ours


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_closed_connection_leaves_no_cycle(built: str, op: str, no_collector: None) -> None:
    with merkle.connect(built) as conn:
        result = OPS[op](conn)
    del conn, result
    ours = _cycles_left()
    assert not ours, f"{op} left merkle objects in reference cycles: {ours.most_common(6)}"


def test_no_cycle_on_any_backend(lake: Lake, no_collector: None) -> None:
    """The same on every store (the S3 one over real HTTP): a lake written, then read
    with a lease, scanned and committed to on connections that are closed."""
    with merkle.connect(lake.uri, **lake.options) as conn:
        db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=16)
        db.write("t", _rows(100)).commit()
    with merkle.connect(lake.uri, **lake.options) as conn:
        db = conn.open_db("shop", lease=True)
        db.get_arrow("t", [3, 50])
        db.to_arrow("t")
        db.write("t", _rows(2, "x")).commit()
        db.release()
    del conn, db
    ours = _cycles_left()
    assert not ours, f"{lake.kind}: merkle objects left in reference cycles: {ours.most_common(6)}"
