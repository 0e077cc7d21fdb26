"""``Database.update`` as field-level patches (issue 11, point 4, and its speed point).

An update no longer reads the records it changes: it stores the fields
given, per key, in the pending batch, and reads lay them over the records.
These tests check that it reads nothing, and that every read, diff, merge,
compaction and the no-change check sees the records as whole-record writes
would have made them.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.storage import open_store
from tests.versions.counting import CountingStore


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"id": i, "name": f"n{i}", "qty": i % 5, "price": float(i)} for i in range(n)]


def _model_update(
    model: dict[int, dict[str, Any]], changes: dict[int, dict[str, Any]]
) -> dict[int, dict[str, Any]]:
    out = {k: dict(v) for k, v in model.items()}
    for key, fields in changes.items():
        if key in out:
            out[key] = {f: v for f, v in {**out[key], **fields}.items() if v is not None}
    return out


def _records(db: merkle.Database) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in db.scan("t")}


def test_an_update_reads_no_record() -> None:
    """Before: an update read every page (of every family) its keys live in."""
    inner = open_store(f"memory://patches-{uuid.uuid4().hex}")
    with merkle.Connection(inner) as conn:
        db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=64)
        db.write("t", _rows(2000)).commit().compact().commit()
    counting = CountingStore(inner)
    with merkle.Connection(counting) as conn:
        db = conn.open_db("shop")
        counting.reset()
        changed = db.update("t", {k: {"qty": 100 + k} for k in range(0, 2000, 7)})
        # The table's root node (its schema) only: no page, no Arrow segment (raw blocks).
        assert [k for k in counting.read_keys() if k.startswith("blocks/bafkr")] == []
        assert counting.block_reads <= 1
        done = changed.commit()
    assert done.get_records("t", [7, 8]) == {
        7: {"id": 7, "name": "n7", "qty": 107, "price": 7.0},
        8: {"id": 8, "name": "n8", "qty": 3, "price": 8.0},
    }


def test_patches_over_every_kind_of_record(conn: merkle.Connection) -> None:
    """Patches over merged records, pending upserts and older patches, under newer writes
    and deletes, read by every path before and after compaction."""
    db = conn.create_db("shop").create_table("t", key="id", tablet_size_limit=8, patch_limit=50)
    model = {r["id"]: r for r in _rows(60)}
    db = db.write("t", _rows(60)).commit().compact().commit()
    steps: list[tuple[str, Any]] = [
        ("update", {3: {"qty": 30}, 4: {"name": None}, 999: {"qty": 1}}),  # merged area
        ("write", [{"id": 70, "name": "new", "qty": 1, "price": 2.5}]),
        ("update", {70: {"price": 9.5, "colour": "red"}, 3: {"price": 0.5}}),  # over pending
        ("update", {3: {"qty": None}, 70: {"colour": "blue"}}),  # over older patches
        ("write", [{"id": 3, "name": "again", "qty": 1, "price": 1.0}]),  # a write wins
        ("update", {3: {"name": "patched"}}),
        ("delete", [4]),
        ("update", {4: {"qty": 44}}),  # a patch of a deleted record does nothing
    ]
    for kind, arg in steps:
        if kind == "update":
            db = db.update("t", arg).commit()
            model = _model_update(model, arg)
        elif kind == "write":
            db = db.write("t", arg).commit()
            model.update({r["id"]: dict(r) for r in arg})
        else:
            db = db.delete("t", arg).commit()
            for key in arg:
                model.pop(key)
        assert _records(db) == model, kind
    assert db.get_records("t", [3, 4, 70, 999]) == {k: model[k] for k in (3, 70)}
    streamed = db.to_batches("t").read_all()
    assert {
        r["id"]: {k: v for k, v in r.items() if v is not None} for r in streamed.to_pylist()
    } == model
    assert streamed.num_rows == len(model) == db.describe_table("t")["count"]
    assert db.to_arrow("t", fields=["colour"]).column("colour").to_pylist().count("blue") == 1
    assert db.get_records("t", [70], fields=["colour"]) == {70: {"id": 70, "colour": "blue"}}
    again = conn.open_db("shop")  # a fresh read of the stored version
    assert _records(again) == model
    compacted = again.compact().commit()
    assert _records(compacted) == model
    assert compacted.describe_table("t")["count"] == len(model)
    merkle.verify(conn)


def test_typed_fields_through_patches(conn: merkle.Connection) -> None:
    data = pa.table(
        {
            "id": pa.array([1, 2, 3, 4], pa.int32()),
            "n": pa.array([1, 2, 3, 4], pa.int8()),
            "when": pa.array([1, 2, 3, 4], pa.timestamp("us", tz="Europe/Berlin")),
        }
    )
    db = conn.create_db("u").create_table("t", key="id", tablet_size_limit=2)
    db = db.write("t", data).commit().compact().commit()
    db = db.update("t", {2: {"n": 20, "extra": "x"}, 3: {"when": None}}).commit()
    db = db.update("t", {2: {"extra": None}, 4: {"extra": "y"}}).commit()
    back = db.to_arrow("t")
    assert back.schema.field("n").type == pa.int8()
    assert back.schema.field("when").type == pa.timestamp("us", tz="Europe/Berlin")
    assert back.column("n").to_pylist() == [1, 20, 3, 4]
    assert back.column("extra").to_pylist() == [None, None, None, "y"]
    assert back.column("when").is_null().to_pylist() == [False, False, True, False]
    assert db.compact().commit().to_arrow("t").equals(back)


def test_an_update_that_changes_nothing_makes_no_version(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="id").write("t", _rows(10)).commit()
    same = db.update("t", {3: {"qty": 3}, 12345: {"qty": 1}}).commit()
    assert same.version == db.version
    changed = db.update("t", {3: {"qty": 4}}).commit()
    assert changed.version == db.version + 1


def test_diff_and_merge_see_patched_records(conn: merkle.Connection) -> None:
    base = conn.create_db("shop").create_table("t", key="id").write("t", _rows(10)).commit()
    branch = conn.create_db("branch", root=base)
    ours = base.update("t", {1: {"qty": 11}}).commit()
    branch.update("t", {2: {"name": "theirs"}}).commit()
    changes = ours.diff(base.version, table="t")
    assert changes.summary()["rows"]["t"] == {"inserted": 0, "updated": 1, "deleted": 0}
    merged = conn.merge("branch", "shop")
    assert merged.get_records("t", [1, 2]) == {
        1: {"id": 1, "name": "n1", "qty": 11, "price": 1.0},
        2: {"id": 2, "name": "theirs", "qty": 2, "price": 2.0},
    }


@pytest.mark.parametrize("pending", [True, False])
def test_update_replays_its_fields_on_a_moved_head(conn: merkle.Connection, pending: bool) -> None:
    db = conn.create_db("shop").create_table("t", key="id").write("t", _rows(10)).commit()
    if not pending:
        db = db.compact().commit()
    mine = db.update("t", {5: {"qty": 50}})
    conn.open_db("shop").write("t", [{"id": 5, "name": "theirs", "qty": 0}]).commit()
    done = mine.commit()
    assert done.get_records("t", [5]) == {5: {"id": 5, "name": "theirs", "qty": 50}}


def test_an_update_cannot_remove_a_field_that_is_not_nullable(conn: merkle.Connection) -> None:
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("qty", pa.int64(), nullable=False)]
    )
    db = conn.create_db("s").create_table("t", key="id", schema=schema)
    db = db.write("t", [{"id": 1, "qty": 1}, {"id": 2, "qty": 2}]).commit()
    for changes in (
        {2: {"qty": None}},
        {1: {"qty": 5}, 2: {"qty": None}},
        {2: {"qty": None, "x": 1}},
    ):
        with pytest.raises(merkle.errors.SchemaError, match=r"'qty' is not nullable.*key 2"):
            db.update("t", changes)
    assert db.update("t", {2: {"qty": 7}}).commit().get_records("t", [2]) == {
        2: {"id": 2, "qty": 7}
    }


@pytest.mark.parametrize(
    "changes",
    [
        {1: {"qty": "lots"}},  # a string for an int64 field
        {1: {"qty": 2**70}},  # out of int64's range
        {1: {"qty": 1}, 2: {"qty": 2.5}},  # a float for an int64 field
    ],
)
def test_a_bad_value_in_a_uniform_update_names_the_field(
    conn: merkle.Connection, changes: dict[int, dict[str, Any]]
) -> None:
    db = conn.create_db("s").create_table("t", key="id").write("t", _rows(5)).commit()
    with pytest.raises(merkle.errors.MerkleError, match="qty"):
        db.update("t", changes)


def test_a_range_scan_reads_only_its_range_of_patched_records() -> None:
    """Patches are laid over records range by range: a scan of a few keys after an update
    of keys all over the table reads what it reads after an update of its keys alone, not
    the pages of every patched record."""
    inner = open_store(f"memory://patches-{uuid.uuid4().hex}")
    with merkle.Connection(inner) as conn:
        base = conn.create_db("wide").create_table("t", key="id", tablet_size_limit=64)
        base = base.write("t", _rows(2000)).commit().compact().commit()
        conn.create_db("narrow", root=base)
        base.update("t", {k: {"qty": -k} for k in range(0, 2000, 7)}).commit()
        narrow = conn.open_db("narrow")
        narrow.update("t", {k: {"qty": -k} for k in range(700, 721, 7)}).commit()

    def blocks_read(name: str) -> tuple[int, list[dict[str, Any]]]:
        counting = CountingStore(inner)
        with merkle.Connection(counting) as conn:
            db = conn.open_db(name)
            counting.reset()
            rows = list(db.scan("t", from_pk=700, to_pk=720))
            return counting.block_reads, rows

    wide, rows = blocks_read("wide")
    narrow_reads, narrow_rows = blocks_read("narrow")
    assert rows == narrow_rows
    assert [r["qty"] for r in rows if r["id"] % 7 == 0] == [-k for k in range(700, 721, 7)]
    assert wide <= narrow_reads
