"""Node versions an older merkle-db refuses instead of misreading (doc/format.md, "Typed nodes").

A probe ran merkle-db of 2026-11-23 (before patches and field identities) on
lakes this one wrote. Two node shapes had changed without a new ``v``:

- table roots gained ``field_ids``/``schema_epoch`` at version 2, so an older
  writer rewrote a root without them (and would drop or rename a field
  without counting the epoch): a field dropped and added again then passed
  for the old one, and a merge put the old field's values into the new one;
- batches gained patches at version 1, so an older reader said "batch ... has
  count 1, holds 0", which reads as corruption, not "upgrade merkle-db".

Every table root with a schema is now written as version 3 and every batch
with patches as version 2; an older reader refuses both with its upgrade
error (``check_node`` with the versions it knows is exactly what it runs).
This merkle-db still reads what it wrote before: version 2 roots with or
without identities, version 1 batches with patches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.blocks.cid import CID
from merkle.blocks.codec import check_node, encode_node
from merkle.db.dbroot import DbRoot
from merkle.errors import IntegrityError, MergeConflictError
from merkle.tablets import Table
from merkle.tablets.nodes import BATCH, TABLE, BatchNode, TableRoot

#: The table root versions a merkle-db from before field identities reads.
ROOT_VERSIONS_BEFORE_IDENTITIES = (1, 2)


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as c:
        yield c


def _stored_table(conn: merkle.Connection, db: str) -> tuple[CID, dict[str, Any]]:
    """The CID and node of table 't''s root as the head of ``db`` stores it."""
    head = DbRoot.from_node(conn.blocks.get_node(CID.parse(conn.open_db(db).root)))
    cid = head.tables["t"]
    return cid, conn.blocks.get_node(cid)


def _commit_table_node(conn: merkle.Connection, db: str, node: dict[str, Any]) -> CID:
    """Commit the next version of ``db`` with table 't''s root replaced by ``node``: the
    bytes an earlier merkle-db wrote. Returns the root's CID."""
    head = conn.open_db(db)
    tables = DbRoot.from_node(conn.blocks.get_node(CID.parse(head.root))).tables
    with conn.writer_lease() as ticket:
        cid = conn.blocks.put_node(node, refresh_before=ticket.lease.start)
        root = DbRoot({**tables, "t": cid}).to_node()
        root_cid = conn.blocks.put_node(root, refresh_before=ticket.lease.start)
        conn.refs.commit(db, head.version, str(root_cid))
    return cid


def _main(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("main").create_table("t", key="id")
    return db.write("t", [{"id": 1, "b": "x"}, {"id": 2, "b": "y"}]).commit("base")


def _readd_b(db: merkle.Database) -> merkle.Database:
    db = db.alter_schema("t", drop=["b"]).commit()
    return db.alter_schema("t", add={"b": pa.string()}).commit()


# -- table roots ---------------------------------------------------------------------------


def _created(conn: merkle.Connection) -> None:
    conn.create_db("main").create_table("t", key="id").commit()  # no schema yet


def _written(conn: merkle.Connection) -> None:
    _main(conn)  # a table that never freed a name: no identities stored


def _readded(conn: merkle.Connection) -> None:
    _readd_b(_main(conn))  # identities stored: b is ("b", 1)


@pytest.mark.parametrize("make", [_created, _written, _readded])
def test_a_table_root_with_a_schema_is_version_3_and_refused_before_identities(
    conn: merkle.Connection, make: Callable[[merkle.Connection], None]
) -> None:
    """Before: version 2, which an older writer read and wrote back without identities."""
    make(conn)
    _, node = _stored_table(conn, "main")
    assert node["v"] == 3
    with pytest.raises(IntegrityError, match=r"format version 3.*upgrade merkle-db"):
        check_node(node, TABLE, versions=ROOT_VERSIONS_BEFORE_IDENTITIES)
    assert TableRoot.from_node(node).typed


def test_a_table_without_a_schema_keeps_version_1(conn: merkle.Connection) -> None:
    table = Table.new(conn.tables, key_field="k", key_codec="int")  # as before schemas
    table = table.write([{"k": 1, "v": "x"}], version=1).flush()
    node = table.root.to_node()
    assert node["v"] == 1
    assert TableRoot.from_node(node) == table.root


def test_a_version_2_root_with_identities_reads_as_written(conn: merkle.Connection) -> None:
    """Roots written with identities before this fix (v 2) keep them: the merge still
    sees the field added again, and the next write stores them at version 3."""
    main = _main(conn)
    conn.create_db("br", root=main)
    conn.open_db("br").update("t", {1: {"b": "changed-on-branch"}}).commit("branch")
    _readd_b(conn.open_db("main")).write("t", [{"id": 3, "b": "new-b"}]).commit()
    _, node = _stored_table(conn, "main")
    legacy = {**node, "v": 2}  # byte for byte what merkle-db wrote before this fix
    stored = _commit_table_node(conn, "main", legacy)

    head = conn.open_db("main")
    assert head.describe_table("t")["id"] == str(stored)
    root = head._table("t").root
    assert root == TableRoot.from_node(node)
    assert (dict(root.field_ids), root.schema_epoch) == ({"b": ("b", 1)}, 1)
    with pytest.raises(MergeConflictError, match="'b' was dropped and added again"):
        conn.merge("br", "main", message="m")

    head.write("t", [{"id": 4, "b": "z"}]).commit()
    _, rewritten = _stored_table(conn, "main")
    assert rewritten["v"] == 3
    assert rewritten["field_ids"] == {"b": ["b", 1]}
    assert rewritten["schema_epoch"] == 1
    with pytest.raises(MergeConflictError, match="'b' was dropped and added again"):
        conn.merge("br", "main", message="m")


def test_a_version_2_root_without_identities_is_written_again_as_version_3(
    conn: merkle.Connection,
) -> None:
    """A root an older writer wrote (v 2, no identities) reads as before; the next
    write makes it version 3, so the older writer cannot rewrite it again."""
    _main(conn)
    _, node = _stored_table(conn, "main")
    assert not {"field_ids", "schema_epoch"} & set(node)
    stored = _commit_table_node(conn, "main", {**node, "v": 2})
    head = conn.open_db("main")
    assert head.describe_table("t")["id"] == str(stored)
    assert head.get_records("t", [1]) == {1: {"id": 1, "b": "x"}}
    head.write("t", [{"id": 3, "b": "z"}]).commit()
    _, rewritten = _stored_table(conn, "main")
    assert rewritten["v"] == 3
    assert {k: v for k, v in rewritten.items() if k not in ("v", "count", "size", "pending")} == {
        k: v for k, v in node.items() if k not in ("v", "count", "size", "pending")
    }
    assert [r["id"] for r in conn.open_db("main").scan("t")] == [1, 2, 3]


# -- batches -------------------------------------------------------------------------------


def _updated(conn: merkle.Connection) -> tuple[dict[str, Any], CID]:
    """Database 'main' after an update of record 1 (a patch), and its table root's node
    and newest batch."""
    _main(conn)
    conn.open_db("main").update("t", {1: {"b": "patched"}}).commit("update")
    _, node = _stored_table(conn, "main")
    return node, node["pending"][0]


def test_a_batch_with_patches_is_version_2_and_refused_before_patches(
    conn: merkle.Connection,
) -> None:
    """Before: version 1, which an older reader took for a batch whose count is wrong."""
    _, batch_cid = _updated(conn)
    batch = conn.blocks.get_node(batch_cid)
    assert batch["patch_count"] == 1
    assert batch["v"] == 2
    with pytest.raises(IntegrityError, match=r"format version 2.*upgrade merkle-db"):
        check_node(batch, BATCH)  # a reader before patches knows version 1 only


def test_a_batch_without_patches_keeps_version_1_byte_for_byte(conn: merkle.Connection) -> None:
    _main(conn)
    _, node = _stored_table(conn, "main")
    batch = conn.blocks.get_node(node["pending"][0])
    assert batch["v"] == 1
    assert not {"patches", "patch_count", "patched"} & set(batch)
    fixed = BatchNode(3, 4, CID.of(b"rows", "raw"), 2, b"\x01", (b"\x00\x07",), b"\x00", 99)
    # The CID merkle-db wrote for this batch before patches and since: lakes keep sharing.
    want = "bafyr4ibzd6jmmuifqv64rrjlanb2ujsnsws34iplcms3ltpkfg43budjja"
    assert str(CID.of(encode_node(fixed.to_node()), "dag-cbor")) == want


def test_a_version_1_batch_with_patches_still_reads(conn: merkle.Connection) -> None:
    """Batches with patches written before this fix (v 1) read with their patches."""
    node, batch_cid = _updated(conn)
    batch = conn.blocks.get_node(batch_cid)
    legacy = {**batch, "v": 1}
    assert BatchNode.from_node(legacy) == BatchNode.from_node(batch)
    with conn.writer_lease() as ticket:
        legacy_cid = conn.blocks.put_node(legacy, refresh_before=ticket.lease.start)
    _commit_table_node(conn, "main", {**node, "pending": [legacy_cid, *node["pending"][1:]]})
    head = conn.open_db("main")
    assert head._table("t").root.pending[0] == legacy_cid
    want = [{"id": 1, "b": "patched"}, {"id": 2, "b": "y"}]
    assert list(head.scan("t")) == want
    assert head.get_records("t", [1]) == {1: want[0]}
    assert head.compact().commit().to_arrow("t").to_pylist() == want


def test_a_version_2_batch_without_patches_is_malformed(conn: merkle.Connection) -> None:
    _main(conn)
    _, node = _stored_table(conn, "main")
    batch = conn.blocks.get_node(node["pending"][0])
    with pytest.raises(IntegrityError, match="malformed: it holds no patches"):
        BatchNode.from_node({**batch, "v": 2})
