"""Cost tests: block reads and bytes (counted by a store wrapper), never time.

A diff reads only the tablets and batches whose CIDs differ; a push after a
1% change copies about 1% of the bytes; a push of what the destination holds
copies nothing.
"""

from __future__ import annotations

import random
import uuid

import pyarrow as pa
import pytest

import merkle
from merkle.blocks.cid import CID, DAG_CBOR
from merkle.blocks.walk import walk_levels

from .counting import CountingStore


def _lake() -> str:
    return f"memory://cost-{uuid.uuid4().hex}"


def _rows(start: int, stop: int, tag: str = "") -> pa.Table:
    ids = pa.array(range(start, stop), type=pa.int64())
    return pa.table(
        {
            "id": ids,
            "v": pa.array(range(start, stop)),
            "s": [f"{tag}{i}" for i in range(start, stop)],
        }
    )


def _blocks(conn: merkle.Connection, root: str) -> dict[str, int]:
    """Every block a version reaches: key -> stored bytes."""
    out = {}
    for level in walk_levels(conn.blocks, [CID.parse(root)], set()):
        for cid in level:
            out[conn.blocks.key(cid)] = conn.blocks.stat(cid).size
    return out


def _reachable(conn: merkle.Connection, cids: list[str]) -> set[str]:
    return {
        conn.blocks.key(cid)
        for level in walk_levels(conn.blocks, [CID.parse(c) for c in cids], set())
        for cid in level
    }


def _two_versions(
    uri: str, rows: int, tablet: int, change: str
) -> tuple[merkle.Database, merkle.Database]:
    with merkle.connect(uri) as conn:
        db = conn.create_db("big").create_table("t", key="id", tablet_size_limit=tablet)
        old = db.write("t", _rows(0, rows)).compact().commit()
        if change == "clustered":  # 100 neighbouring records, folded into the tablets
            start = rows // 3
            new = old.write("t", _rows(start, start + 100, "x")).compact().commit()
        else:  # 100 records anywhere, left as a pending batch
            keys = random.Random(7).sample(range(rows), 100)
            new = old.write("t", [{"id": k, "v": -k} for k in keys]).commit()
        return old, new


def _diff_cost(rows: int, tablet: int, change: str) -> None:
    uri = _lake()
    old, new = _two_versions(uri, rows, tablet, change)
    with merkle.connect(uri) as plain:
        before = {t["id"] for t in plain.open_db("big", version=old.version).list_tablets("t")}
        after = {t["id"] for t in plain.open_db("big", version=new.version).list_tablets("t")}
        table_bytes = sum(_blocks(plain, old.root).values())
        differing = sorted(before ^ after)
        head = plain.open_db("big", version=new.version)
        pending = [str(c) for c in head._table("t").root.pending]
        holding = set(differing)
        if change == "clustered":
            allowed_data = _reachable(plain, differing)
        else:
            # A pending change: its batch, plus the tablets holding the old records.
            allowed_data = _reachable(plain, pending)
            changed = {r["key"] for r in head.diff(old.version)["t"].records()}
            for tablet_info in plain.open_db("big", version=old.version).list_tablets("t"):
                if any(tablet_info["start"] <= k <= tablet_info["end"] for k in changed):
                    allowed_data |= _reachable(plain, [tablet_info["id"]])
                    holding.add(tablet_info["id"])
    counting = CountingStore(merkle.connect(uri).store)
    with merkle.Connection(counting) as conn:  # cold caches: every read reaches the store
        newer = conn.open_db("big", version=new.version)
        counting.reset()
        diff = newer.diff(old.version)
        records = diff["t"].records()
        assert len(records) == 100
        assert all(r["change"] == "update" for r in records)
        read = counting.read_keys()
        index_nodes = {k for k in read if k not in allowed_data and _is_node(conn, k)}
        data_reads = read - index_nodes
        assert data_reads <= allowed_data, sorted(data_reads - allowed_data)[:3]
        untouched = {conn.blocks.key(CID.parse(t)) for t in (before & after) - holding}
        assert untouched
        assert not (read & untouched), "a tablet both versions share was read"
        if change == "clustered":
            assert counting.read_bytes < table_bytes * 0.05, (counting.read_bytes, table_bytes)


def _is_node(conn: merkle.Connection, key: str) -> bool:
    cid = CID.parse(key[len("blocks/") :])
    if cid.codec != DAG_CBOR:
        return False
    node = conn.blocks.get_node(cid)
    return isinstance(node, dict) and node.get("type") in (
        "merkle/index",
        "merkle/table",
        "merkle/db",
    )


@pytest.mark.parametrize("change", ["clustered", "pending"])
def test_a_diff_of_100_changed_records_reads_only_the_tablets_and_batches_that_differ(
    change: str,
) -> None:
    _diff_cost(200_000, 2_000, change)


@pytest.mark.slow
def test_a_diff_of_100_changed_records_in_10_million_rows_reads_only_what_differs() -> None:
    _diff_cost(10_000_000, 100_000, "clustered")


def _push_bytes(src_uri: str, dst_uri: str) -> tuple[int, int]:
    counting = CountingStore(merkle.connect(dst_uri).store)
    with merkle.connect(src_uri) as src, merkle.Connection(counting) as dst:
        report = merkle.sync(src, dst, "big", history=False)
        assert report.copy.bytes_copied == counting.write_bytes
        return counting.write_bytes, counting.block_writes


@pytest.mark.parametrize("change", ["clustered", "random"])
def test_a_second_push_after_a_1_percent_change_copies_about_1_percent_of_the_bytes(
    change: str,
) -> None:
    src, dst = _lake(), _lake()
    rows = 100_000
    with merkle.connect(src) as conn:
        db = conn.create_db("big").create_table("t", key="id", tablet_size_limit=1_000)
        db = db.write("t", _rows(0, rows)).compact().commit()
        first, _ = _push_bytes(src, dst)
        if change == "clustered":
            db = db.write("t", _rows(5_000, 6_000, "x")).compact().commit()
        else:  # 1% of the records anywhere: a pending batch, as a small commit makes
            keys = random.Random(1).sample(range(rows), rows // 100)
            db = db.write("t", [{"id": k, "v": -k, "s": "changed"} for k in keys]).commit()
    second, _ = _push_bytes(src, dst)
    assert 0 < second <= first * 0.03, (second, first)
    third, writes = _push_bytes(src, dst)
    assert (third, writes) == (0, 0)  # the destination holds the version: nothing is copied
