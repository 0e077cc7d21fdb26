"""Clones and time travel: copy-on-write independence, and old versions that never change.

A clone shares every block with its source; a change to either must never
show in the other. Every committed version must keep reading the same data
whatever is committed afterwards, on the source or on its clones. Each check
compares full scans of every table.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Lake

import merkle
from merkle.errors import UsageError

from .conftest import Connect
from .helpers import all_tables, snapshot

State = dict[str, list[dict[str, Any]]]


class Model:
    """The expected contents of a database: table -> key -> record."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[int, dict[str, Any]]] = {}

    def copy(self) -> Model:
        other = Model()
        other.tables = {t: dict(rows) for t, rows in self.tables.items()}
        return other

    def state(self) -> State:
        return {t: [rows[k] for k in sorted(rows)] for t, rows in sorted(self.tables.items())}


def _write(db: merkle.Database, model: Model, table: str, records: list[dict[str, Any]]) -> Any:
    model.tables[table].update({r["k"]: r for r in records})
    return db.write(table, records)


def _delete(db: merkle.Database, model: Model, table: str, keys: list[int]) -> Any:
    for k in keys:
        model.tables[table].pop(k, None)
    return db.delete(table, keys)


def _create(db: merkle.Database, model: Model, table: str) -> merkle.Database:
    model.tables[table] = {}
    return db.create_table(table, key="k", tablet_size_limit=5, branching_factor=3, patch_limit=7)


def _source(conn: merkle.Connection) -> tuple[merkle.Database, Model, dict[int, State]]:
    """Database 'src' after a few commits; the model and the state of every version."""
    model = Model()
    states: dict[int, State] = {}
    db = conn.create_db("src", metadata={"who": "src"})
    states[0] = {}
    db = _create(_create(db, model, "a"), model, "b")
    db = _write(db, model, "a", [{"k": i, "v": i} for i in range(40)])
    db = _write(db, model, "b", [{"k": i, "s": f"b{i}"} for i in range(0, 30, 3)]).commit()
    states[db.version] = model.state()
    db = _write(db, model, "a", [{"k": i, "v": -i} for i in range(5, 9)])
    db = _delete(db, model, "b", [3, 6]).commit()
    states[db.version] = model.state()
    return db, model, states


def _check_versions(conn: merkle.Connection, name: str, states: dict[int, State]) -> None:
    for version, state in states.items():
        assert all_tables(conn.open_db(name, version=version)) == state, (name, version)


def test_changing_a_clone_never_changes_the_source_and_back(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    src, src_model, src_states = _source(conn)
    clone = conn.create_db("dev", root=src)
    assert clone.version == 0
    assert all_tables(clone) == src_model.state()
    assert clone.describe()["metadata"] == {"who": "src"}
    dev_model = src_model.copy()
    dev_states = {0: dev_model.state()}

    # Interleave commits on both: every kind of change on each side.
    for round_ in range(4):
        dev = conn.open_db("dev")
        dev = _write(
            dev, dev_model, "a", [{"k": 100 + round_ * 10 + j, "dev": round_} for j in range(9)]
        )
        dev = _delete(dev, dev_model, "a", [round_, 20 + round_])
        if "b" in dev_model.tables:
            dev = _write(dev, dev_model, "b", [{"k": 0, "dev": round_}])
        if round_ == 1:
            dev = dev.drop_table("b")
            del dev_model.tables["b"]
            dev = _create(dev, dev_model, "c")
            dev = _write(dev, dev_model, "c", [{"k": 1, "only": "dev"}])
            dev = dev.alter_db_meta(lambda m: {**m, "who": "dev"})
        if round_ >= 2:
            dev = _write(dev, dev_model, "c", [{"k": round_, "x": round_}])
        dev = dev.commit()
        dev_states[dev.version] = dev_model.state()

        src = conn.open_db("src")
        src = _write(src, src_model, "a", [{"k": j, "src": round_} for j in range(round_, 40, 4)])
        src = _delete(src, src_model, "b", [round_ * 3 + 9])
        if round_ == 2:
            src = src.alter_families("a", {"f": {"v"}})
            src = src.alter_table_meta("a", lambda _: {"src": True})
        src = src.commit()
        src_states[src.version] = src_model.state()

    other = connect(lake)
    assert all_tables(other.open_db("src")) == src_model.state()
    assert all_tables(other.open_db("dev")) == dev_model.state()
    assert other.open_db("src").describe()["metadata"] == {"who": "src"}
    assert other.open_db("dev").describe()["metadata"] == {"who": "dev"}
    assert other.open_db("src").list_tables() == ["a", "b"]
    assert other.open_db("dev").list_tables() == ["a", "c"]
    assert other.open_db("dev").describe_table("a")["metadata"] is None
    assert other.open_db("dev").describe_table("a")["families"] == {}
    _check_versions(other, "src", src_states)
    _check_versions(other, "dev", dev_states)


def test_clone_is_one_journal_entry_and_no_blocks(conn: merkle.Connection) -> None:
    src, model, _ = _source(conn)
    before = snapshot(conn.store)
    clone = conn.create_db("dev", root=src)
    after = snapshot(conn.store)
    assert after.blocks == before.blocks
    new = set(after.others) - set(before.others)
    assert {key for key in new if not key.startswith("leases/")} <= {
        "refs/dev/00000000000000000000",
        "refs/dev/HEAD",
    }
    assert "refs/dev/00000000000000000000" in new
    assert clone.root == src.root
    [entry] = conn.history("dev")
    assert entry.root == src.root
    assert entry.forked_from == {"db": "src", "version": src.version}
    assert all_tables(clone) == model.state()


def test_clone_of_a_past_version(conn: merkle.Connection) -> None:
    src, _, states = _source(conn)
    past = conn.open_db("src", version=1)
    clone = conn.create_db("old", root=past)
    assert all_tables(clone) == states[1]
    assert clone.root == past.root
    changed = clone.write("a", [{"k": 1000}]).commit()
    assert changed.get_records("a", [1000]) == {1000: {"k": 1000}}
    _check_versions(conn, "src", states)
    assert all_tables(conn.open_db("src")) == states[src.version]


def test_clone_from_a_root_string(lake: Lake, conn: merkle.Connection, connect: Connect) -> None:
    src, model, _ = _source(conn)
    clone = connect(lake).create_db("dev", root=src.root)
    assert clone.root == src.root
    assert all_tables(clone) == model.state()
    clone.write("a", [{"k": -1}]).commit()
    assert all_tables(conn.open_db("src")) == model.state()


def test_clone_of_an_uncommitted_value_takes_its_committed_root(conn: merkle.Connection) -> None:
    src, model, _ = _source(conn)
    dirty = src.write("a", [{"k": 999, "uncommitted": True}]).drop_table("b")
    clone = conn.create_db("dev", root=dirty)
    assert clone.root == src.root
    assert all_tables(clone) == model.state()


def test_clone_of_a_clone_and_dropping_the_source(conn: merkle.Connection) -> None:
    src, model, states = _source(conn)
    first = conn.create_db("c1", root=src).write("a", [{"k": 500, "c": 1}]).commit()
    second = conn.create_db("c2", root=first).write("a", [{"k": 501, "c": 2}]).commit()
    conn.drop_db("src")
    conn.drop_db("c1")
    assert conn.list_dbs() == ["c2"]
    expected = model.copy()
    expected.tables["a"].update({500: {"k": 500, "c": 1}, 501: {"k": 501, "c": 2}})
    assert all_tables(conn.open_db("c2")) == expected.state()
    assert all_tables(second) == expected.state()
    # The dropped source's versions still read until GC.
    _check_versions(conn, "src", states)


def test_clone_takes_no_metadata(conn: merkle.Connection) -> None:
    src, _, _ = _source(conn)
    with pytest.raises(UsageError, match="metadata"):
        conn.create_db("dev", root=src, metadata={"x": 1})
    assert conn.list_dbs() == ["src"]


def test_old_versions_read_the_same_after_later_commits(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    """Many commits with small limits (splits, merges, flushes): no version ever changes."""
    model = Model()
    db = _create(conn.create_db("hist"), model, "t").commit()
    states = {0: {}, db.version: model.state()}
    arrows = {}
    for round_ in range(15):
        start = (round_ * 17) % 60
        db = _write(
            db, model, "t", [{"k": start + j, "r": round_} for j in range(round_ % 4 * 3 + 1)]
        )
        if round_ % 3 == 2:
            db = _delete(db, model, "t", list(range(start - 20, start - 5)))
        if round_ == 9:
            db = _write(db, model, "t", [{"k": 1000 + j, "bulk": j} for j in range(40)])
        db = db.commit()
        states[db.version] = model.state()
        arrows[db.version] = db.to_arrow("t")
        # Each earlier version, read now through the same connection, is unchanged.
        assert all_tables(conn.open_db("hist", version=db.version - 1)) == states[db.version - 1]
    other = connect(lake)
    _check_versions(other, "hist", states)
    for version, table in arrows.items():
        assert other.open_db("hist", version=version).to_arrow("t").equals(table)
    assert other.open_db("hist").describe_table("t")["tablets"] > 3
