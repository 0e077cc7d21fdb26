"""Read-modify calls in one transaction fold O(1) buffered changes each, not all of them.

A loop of ``upsert`` (or ``write`` then a read, or ``delete_where``) in one
transaction used to re-fold every buffered change on each call: quadratic in
the number of calls. A state derived from another by one more change now folds
that change onto its parent's fold (:meth:`merkle.db.tablestate.TableState.folded`).
These tests count the work (contents given to ``fold`` per call, through
``merkle.db.tablestate.fold``), never time, and check that the derived fold is
the very content a fold of every change gives, down to the stored CIDs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import merkle
import merkle.db.tablestate as tablestate
from merkle.db.dbroot import DbRoot
from merkle.db.tablestate import TableState
from merkle.tablets.batch import BatchContent
from merkle.tablets.table import Table

N = 40  # calls per loop: the old code folded ~N²/2 contents in all, this folds ~2N


@pytest.fixture
def folds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of contents of each fold TableState asks for."""
    sizes: list[int] = []
    real = tablestate.fold

    def counting(contents: Sequence[BatchContent], key_field: str, codec: Any) -> BatchContent:
        sizes.append(len(contents))
        return real(contents, key_field, codec)

    monkeypatch.setattr(tablestate, "fold", counting)
    return sizes


def _loaded(conn: merkle.Connection, n: int = N) -> merkle.Database:
    db = conn.create_db("d").create_table("t", key="id").commit()
    return db.write("t", [{"id": i, "v": 0} for i in range(n)]).commit()


Step = Callable[[merkle.Database, int], merkle.Database]


def _write_then_get(db: merkle.Database, i: int) -> merkle.Database:
    db = db.write("t", [{"id": i, "v": 1}])
    assert db.get_records("t", [i]) == {i: {"id": i, "v": 1}}
    return db


def _write_then_scan(db: merkle.Database, i: int) -> merkle.Database:
    db = db.write("t", [{"id": i, "v": 2, f"f{i % 3}": i}])
    assert sum(1 for _ in db.scan("t")) == N
    return db


def _delete_then_get(db: merkle.Database, i: int) -> merkle.Database:
    db = db.delete("t", [i])
    assert db.get_records("t", [i]) == {}
    return db


STEPS: dict[str, Step] = {
    "upsert": lambda db, i: db.upsert("t", [{"id": i, "w": 1}]),
    "write+get_records": _write_then_get,
    "write+scan": _write_then_scan,
    "delete_where": lambda db, i: db.delete_where("t", lambda r, i=i: r["id"] == i),
    "delete+get_records": _delete_then_get,
}


@pytest.mark.parametrize("name", sorted(STEPS))
def test_each_call_folds_only_its_new_change(
    conn: merkle.Connection, folds: list[int], name: str
) -> None:
    step = STEPS[name]
    db = _loaded(conn)
    per_call = []
    for i in range(N):
        folds.clear()
        db = step(db, i)
        per_call.append(sum(folds))
    # The first call folds one change; every later one its new change and its parent's fold.
    assert max(per_call) <= 2, per_call
    assert sum(per_call) <= 2 * N, per_call
    db = db.commit()
    if name.startswith("delete"):
        assert db.describe_table("t")["count"] == 0
    else:
        assert db.describe_table("t")["count"] == N


def test_a_rebase_replay_folds_each_op_once(connect: Any, lake: Any, folds: list[int]) -> None:
    mine = _loaded(connect(lake))
    for i in range(N):
        mine = mine.upsert("t", [{"id": i, "w": 1}])
    connect(lake).open_db("d").write("t", [{"id": N, "v": 9}]).commit()  # a concurrent commit
    folds.clear()
    done = mine.commit()  # replays every upsert on the new head
    assert sum(folds) <= 3 * N, folds
    assert done.describe_table("t")["count"] == N + 1
    assert done.get_records("t", [0, N]) == {0: {"id": 0, "v": 0, "w": 1}, N: {"id": N, "v": 9}}


def _same_as_a_full_fold(state: TableState, version: int) -> None:
    """``state``'s fold (derived from its parents') equals a fold of all its changes, and
    the table it materialises stores the same blocks."""
    full = TableState(state.table, state.changes)
    mine, theirs = state.folded(), full.folded()
    assert mine.upserts.table.schema.equals(theirs.upserts.table.schema, check_metadata=True)
    assert mine.upserts.table.equals(theirs.upserts.table)
    assert mine.upserts.keys.equals(theirs.upserts.keys)
    assert mine.deletes.equals(theirs.deletes)
    assert mine.upserts_in_merged.tolist() == theirs.upserts_in_merged.tolist()
    assert mine.deletes_in_merged.tolist() == theirs.deletes_in_merged.tolist()
    assert (mine.patches is None) == (theirs.patches is None)
    if mine.patches is not None and theirs.patches is not None:
        assert mine.patches.rows.table.equals(theirs.patches.rows.table)
        assert mine.patches.masks.keys() == theirs.patches.masks.keys()
        for name, mask in mine.patches.masks.items():
            assert mask.tolist() == theirs.patches.masks[name].tolist()
    assert state.current(version).save() == full.current(version).save()


def _untyped(conn: merkle.Connection, records: list[dict[str, Any]]) -> merkle.Database:
    """A database whose table 't' is a table as merkle-db wrote them before schemas: no
    schema, so one field may hold values of several types (CBOR when they meet)."""
    name = f"old{len(conn.list_dbs())}"
    conn.create_db(name)
    table = Table.new(conn.tables, key_field="id", key_codec="int")  # a version 1 root
    table = table.write(records, version=1).flush()
    with conn.writer_lease() as ticket:
        cid = table.save()
        root = conn.blocks.put_node(DbRoot({"t": cid}).to_node(), refresh_before=ticket.lease.start)
        conn.refs.commit(name, 0, str(root))
    db = conn.open_db(name)
    assert not db._state("t").table.root.typed
    return db


def _check_each_step(db: merkle.Database, steps: Sequence[Step]) -> merkle.Database:
    for i, step in enumerate(steps):
        db = step(db, i)
        _same_as_a_full_fold(db._state("t"), db.version + 1)
    return db


def test_overwritten_values_still_decide_columns_and_types(conn: merkle.Connection) -> None:
    """A column whose values only overwritten rows hold stays in a full fold (null), and
    a field of two types becomes CBOR: the derived fold gives the same."""
    db = _untyped(conn, [{"id": i, "v": 0} for i in range(4)])
    steps: list[Step] = [
        lambda db, i: db.write("t", [{"id": 1, "gone": 5}]),
        lambda db, i: db.write("t", [{"id": 1, "v": 1}]),  # "gone" only in an overwritten row
        lambda db, i: db.write("t", [{"id": 2, "v": 2}]),
        lambda db, i: db.write("t", [{"id": 3, "mixed": "text"}]),
        lambda db, i: db.write("t", [{"id": 3, "mixed": 7}]),  # two types, one overwritten
        lambda db, i: db.write("t", [{"id": 0, "mixed": 8}]),
        lambda db, i: db.write("t", [{"id": 5, "none": None, "v": 3}]),
        lambda db, i: db.delete("t", [5, 9]),
        lambda db, i: db.write("t", [{"id": 9, "v": 4}]),
    ]
    for check in range(len(steps)):  # a read after each step, and reads only from step `check`
        start = db
        for i, step in enumerate(steps):
            start = step(start, i)
            if i >= check:
                _same_as_a_full_fold(start._state("t"), start.version + 1)
    done = _check_each_step(db, steps).commit()
    assert done.get_records("t", [1, 3, 5, 9]) == {
        1: {"id": 1, "v": 1},
        3: {"id": 3, "mixed": 7},
        9: {"id": 9, "v": 4},
    }


def test_a_field_only_overwritten_rows_hold_in_a_typed_table(conn: merkle.Connection) -> None:
    db = _loaded(conn, 4)
    steps: list[Step] = [
        lambda db, i: db.write("t", [{"id": 1, "v": 1, "gone": 5}]),
        lambda db, i: db.write("t", [{"id": 1, "v": 2}]),
        lambda db, i: db.write("t", [{"id": 2, "v": 2}]),
        lambda db, i: db.upsert("t", [{"id": 2, "other": "x"}]),
        lambda db, i: db.write("t", [{"id": 2, "v": 3}]),
        lambda db, i: db.write("t", [{"id": 3, "v": 3}]),
    ]
    done = _check_each_step(db, steps).commit()
    assert done.get_records("t", [1, 2]) == {1: {"id": 1, "v": 2}, 2: {"id": 2, "v": 3}}


def test_updates_of_a_typed_table_fold_as_before(conn: merkle.Connection) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("qty", pa.int64())])
    db = conn.create_db("s").create_table("t", key="id", schema=schema)
    db = db.write("t", [{"id": i, "qty": i} for i in range(6)]).commit()
    steps: list[Step] = [
        lambda db, i: db.write("t", [{"id": 1, "qty": 10}]),
        lambda db, i: db.update("t", {2: {"qty": 20}, 7: {"qty": 70}}),
        lambda db, i: db.write("t", [{"id": 7, "qty": 7}]),
        lambda db, i: db.update("t", {7: {"qty": None}, 1: {"qty": 11}}),
        lambda db, i: db.delete("t", [3]),
        lambda db, i: db.upsert("t", [{"id": 4, "qty": 40}]),
    ]
    done = _check_each_step(db, steps).commit()
    assert done.get_records("t", [1, 2, 3, 4, 7]) == {
        1: {"id": 1, "qty": 11},
        2: {"id": 2, "qty": 20},
        4: {"id": 4, "qty": 40},
        7: {"id": 7},
    }


_VALUES = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from(["a", "b"]), st.booleans())
_RECORD = st.fixed_dictionaries(
    {"id": st.integers(0, 5)},
    optional={name: _VALUES for name in ("a", "b", "c")},
)
_CHANGE = st.one_of(
    st.lists(_RECORD, min_size=1, max_size=3, unique_by=lambda r: r["id"]).map(
        lambda rows: ("write", rows)
    ),
    st.lists(st.integers(0, 7), min_size=1, max_size=3).map(lambda keys: ("delete", keys)),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(changes=st.lists(_CHANGE, min_size=1, max_size=8), reads=st.lists(st.booleans()))
def test_a_derived_fold_is_a_full_fold(
    conn: merkle.Connection, changes: list[tuple[str, list[Any]]], reads: list[bool]
) -> None:
    db = _untyped(conn, [{"id": i, "a": i} for i in range(3)])
    model = {i: {"id": i, "a": i} for i in range(3)}
    for i, (kind, payload) in enumerate(changes):
        if kind == "write":
            db = db.write("t", payload)
            model.update({r["id"]: {k: v for k, v in r.items() if v is not None} for r in payload})
        else:
            db = db.delete("t", payload)
            for key in payload:
                model.pop(key, None)
        if i < len(reads) and reads[i]:  # a read here: the next state derives its fold
            _same_as_a_full_fold(db._state("t"), db.version + 1)
    _same_as_a_full_fold(db._state("t"), db.version + 1)
    assert {r["id"]: r for r in db.commit().scan("t")} == model
