"""A connection opened in a new process sees exactly the committed state, nothing more.

The state compared is everything the API reads back: the list of
databases, the history, metadata, every table's records, counts and
metadata (``workers.state_of``). Uncommitted changes, whether held by a live
value in the parent or left behind by a child that exited, must not show.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Lake

import merkle

from .conftest import Connect
from .workers import read_state, run_one, run_steps, state_of

pytestmark = pytest.mark.slow


def _committed(conn: merkle.Connection) -> dict[str, Any]:
    """Build 'shop' over several commits: tablets, pending batches, metadata; and a clone."""
    db = conn.create_db("shop", metadata={"owner": "ops"})
    db = db.create_table(
        "orders",
        key="id",
        tablet_size_limit=8,
        branching_factor=3,
        patch_limit=10,
        metadata={"a": 1},
        schema_free=["qty"],  # "qty" mixes ints and a string below
    )
    db = db.create_table("notes", key="name", families={"body": {"text"}})
    db = db.write("orders", [{"id": i, "qty": i % 5, "tags": ["x"] * (i % 3)} for i in range(60)])
    db = db.write("notes", [{"name": "n1", "text": "hello", "n": None}]).commit(message="load")
    db = db.write("orders", [{"id": 7, "qty": 70}, {"id": 1000, "qty": "mixed"}])
    db = db.delete("orders", [3, 4]).commit(message="edit", author="ana")
    db = db.alter_db_meta(lambda m: {**m, "v": 2}).commit()
    conn.create_db("dev", root=db).write("notes", [{"name": "dev only"}]).commit()
    return state_of(conn, conn.open_db("shop"))


def test_a_new_process_sees_the_committed_state(shared_lake: Lake, connect: Connect) -> None:
    conn = connect(shared_lake)
    expected = _committed(conn)
    # Spot checks, so the comparison below is against known data.
    assert expected["dbs"] == ["dev", "shop"]
    assert [h[0] for h in expected["history"]] == [3, 2, 1, 0]
    assert expected["metadata"] == {"owner": "ops", "v": 2}
    assert expected["tables"]["orders"]["count"] == 59
    assert expected["tables"]["notes"]["records"] == [{"name": "n1", "text": "hello"}]
    assert conn.open_db("shop").describe_table("orders")["patch"]["count"] > 0
    assert conn.open_db("shop").describe_table("orders")["tablets"] > 3

    # Uncommitted changes of every kind, held by a live value in this process.
    dirty = conn.open_db("shop").write("orders", [{"id": 5000}]).delete("orders", [0, 1])
    dirty = dirty.drop_table("notes").create_table("extra", key="k").write("extra", [{"k": 1}])
    dirty = dirty.alter_db_meta(lambda _: {"dirty": True})
    assert dirty.list_tables() == ["extra", "orders"]

    seen = run_one(read_state, shared_lake.uri, shared_lake.options, "shop")
    assert seen == expected
    assert run_one(read_state, shared_lake.uri, shared_lake.options, "dev")["tables"]["notes"][
        "records"
    ] == [{"name": "dev only"}, {"name": "n1", "text": "hello"}]


def test_what_a_process_left_uncommitted_is_gone(shared_lake: Lake, connect: Connect) -> None:
    conn = connect(shared_lake)
    conn.create_db("shop").create_table("t", key="k").commit()
    steps = [
        ("write", "t", [{"k": 1, "v": "committed"}]),
        ("commit", "first"),
        ("write", "t", [{"k": 2, "v": "committed"}]),
        ("delete", "t", [1]),
        ("commit", "second"),
        # Left uncommitted when the process exits:
        ("write", "t", [{"k": 3, "v": "never"}]),
        ("delete", "t", [2]),
        ("create_table", "ghost", "k"),
        ("meta", {"never": True}),
    ]
    versions = run_one(run_steps, shared_lake.uri, shared_lake.options, "shop", steps)
    assert versions == [2, 3]
    reopened = connect(shared_lake)
    head = reopened.open_db("shop")
    assert head.version == 3
    assert head.list_tables() == ["t"]
    assert list(head.scan("t")) == [{"k": 2, "v": "committed"}]
    assert head.describe()["metadata"] is None
    assert [(e.version, e.message) for e in reopened.history("shop")] == [
        (3, "second"),
        (2, "first"),
        (1, None),
        (0, None),
    ]
    # And the process's view equals this one's.
    assert run_one(read_state, shared_lake.uri, shared_lake.options, "shop") == state_of(
        reopened, head
    )
