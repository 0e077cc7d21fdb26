"""A merge must never commit a table root that no read accepts; its conflict hint says
what ``"ours"``/``"theirs"`` take.

From a stateful model probe: both sides of a merge added field ``b`` (one
field, one identity) and one side then renamed it to ``r``. The merged
schema kept ours' ``b`` and took theirs' ``r`` with that same identity, the
merge committed, and every later read of the table raised ``IntegrityError``
("two fields share one identity"), with any ``resolve``, in both directions.
Such a rename is now a table conflict (renamed on one side while the other
changed the table), and every table root is checked against the reader's
rules before it is stored.

The same probe found that a conflict of a table's families or metadata,
settled by ``"ours"``/``"theirs"``, takes that side's setting and merges the
rows key by key, while the ``"fail"`` error's hint said it takes that side's
whole table: the hint now says which rule applies.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

import merkle
from merkle.db.merge import SETTINGS_CONFLICT_HINT, TABLE_CONFLICT_HINT
from merkle.errors import IntegrityError, MergeConflictError
from merkle.tablets.table import Table


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as c:
        yield c


def _both_add_b(conn: merkle.Connection, renames: dict[str, dict[str, str]]) -> None:
    """'main' and its clone 'br' each add field 'b' by a write; ``renames`` (branch ->
    {old: new}) renames it afterwards on that branch, in the same commit."""
    db = conn.create_db("main").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    conn.create_db("br", root=db)
    for branch, value in (("main", ("x", 2)), ("br", ("y", 3))):
        tx = conn.open_db(branch).write("t", [{"k": value[1], "b": value[0]}])
        if branch in renames:
            tx = tx.alter_schema("t", rename=renames[branch])
        tx.commit()


def _rows(db: merkle.Database) -> list[dict[str, object]]:
    return sorted(db.scan("t"), key=lambda r: int(r["k"]))  # type: ignore[call-overload]


@pytest.mark.parametrize("renamer", ["main", "br"])
@pytest.mark.parametrize(("source", "into"), [("br", "main"), ("main", "br")])
def test_a_field_added_on_both_sides_and_renamed_on_one_is_a_table_conflict(
    conn: merkle.Connection, renamer: str, source: str, into: str
) -> None:
    _both_add_b(conn, {renamer: {"b": "r"}})
    head = conn.open_db(into)
    with pytest.raises(MergeConflictError) as info:
        conn.merge(source, into)
    why = info.value.table_conflicts["t"]
    assert "field 'b', added on both sides" in why
    assert "'r'" in why
    assert "renamed on one side" in why
    assert TABLE_CONFLICT_HINT in str(info.value)
    assert conn.open_db(into).version == head.version  # nothing committed
    assert _rows(conn.open_db(into)) == _rows(head)


@pytest.mark.parametrize("resolve", ["ours", "theirs"])
@pytest.mark.parametrize("renamer", ["main", "br"])
def test_resolving_that_conflict_commits_one_sides_readable_table(
    conn: merkle.Connection, resolve: str, renamer: str
) -> None:
    _both_add_b(conn, {renamer: {"b": "r"}})
    winner = conn.open_db("main" if resolve == "ours" else "br")
    merged = conn.merge("br", "main", resolve=resolve)
    head = conn.open_db("main")
    assert head.version == merged.version
    assert _rows(head) == _rows(winner)  # the whole table of that side, and it reads
    assert head.describe_table("t")["schema"].names == winner.describe_table("t")["schema"].names
    assert merkle.verify(conn).ok


def test_a_field_added_on_both_sides_renamed_to_two_names_is_a_table_conflict(
    conn: merkle.Connection,
) -> None:
    _both_add_b(conn, {"main": {"b": "r"}, "br": {"b": "s"}})
    with pytest.raises(MergeConflictError) as info:
        conn.merge("br", "main")
    why = info.value.table_conflicts["t"]
    assert "field 'b', added on both sides, is 'r' on our side and 's' on their side" in why


def test_a_field_added_on_both_sides_renamed_alike_on_both_still_merges(
    conn: merkle.Connection,
) -> None:
    """The same change on both sides is taken once: a guard, not a finding."""
    _both_add_b(conn, {"main": {"b": "r"}, "br": {"b": "r"}})
    conn.merge("br", "main")
    assert _rows(conn.open_db("main")) == [{"k": 1}, {"k": 2, "r": "x"}, {"k": 3, "r": "y"}]


def test_a_table_root_the_reader_refuses_is_never_stored(conn: merkle.Connection) -> None:
    """Whatever builds it, a root with two fields of one identity raises before storing."""
    db = conn.create_db("main").create_table("t", key="k").write("t", [{"k": 1, "a": 1, "b": 2}])
    table = db._table("t")
    bad = Table(table.ts, replace(table.root, field_ids={"b": ("a", 0)}))
    with pytest.raises(IntegrityError, match="refusing to write a table root") as info:
        bad.save()
    assert "two fields share one identity" in str(info.value)
    assert "nothing was stored" in str(info.value)


def _settings_conflict(conn: merkle.Connection, what: str) -> None:
    """'main' and 'br' change the families (or the table's metadata) of 't' differently,
    and each writes a row of its own."""
    db = conn.create_db("main").create_table("t", key="k", metadata={"x": 0})
    db = db.write("t", [{"k": i, "a": i} for i in range(3)]).commit()
    conn.create_db("br", root=db)
    for branch, n in (("main", 1), ("br", 2)):
        tx = conn.open_db(branch)
        if what == "families":
            tx = tx.alter_families("t", {f"g{n}": {"a"}})
        else:
            tx = tx.alter_table_meta("t", lambda _m, n=n: {"x": n})
        tx.write("t", [{"k": 10 * n, "a": n}]).commit()


@pytest.mark.parametrize("what", ["families", "metadata"])
def test_a_settings_conflict_hint_says_what_resolving_takes(
    conn: merkle.Connection, what: str
) -> None:
    _settings_conflict(conn, what)
    with pytest.raises(MergeConflictError) as info:
        conn.merge("main", "br")
    assert info.value.table_conflicts == {"t": f"its {what} changed on both sides"}
    assert SETTINGS_CONFLICT_HINT in str(info.value)
    assert "whole table" not in str(info.value)  # the rows are merged key by key


@pytest.mark.parametrize("what", ["families", "metadata"])
@pytest.mark.parametrize("resolve", ["ours", "theirs"])
def test_a_settings_conflict_resolved_takes_the_setting_and_merges_the_rows(
    conn: merkle.Connection, what: str, resolve: str
) -> None:
    """What the hint and doc/versions.md now say: a guard of the documented rule."""
    _settings_conflict(conn, what)
    winner = conn.open_db("br" if resolve == "ours" else "main").describe_table("t")
    merged = conn.merge("main", "br", resolve=resolve).describe_table("t")
    assert merged[what] == winner[what]
    assert sorted(int(r["k"]) for r in conn.open_db("br").scan("t")) == [0, 1, 2, 10, 20]


def test_the_database_metadata_conflict_hint_is_the_settings_one(
    conn: merkle.Connection,
) -> None:
    db = conn.create_db("main").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    conn.create_db("br", root=db)
    conn.open_db("main").alter_db_meta(lambda _m: {"x": 1}).commit()
    conn.open_db("br").alter_db_meta(lambda _m: {"x": 2}).commit()
    with pytest.raises(MergeConflictError) as info:
        conn.merge("main", "br")
    assert set(info.value.table_conflicts) == {""}
    assert SETTINGS_CONFLICT_HINT in str(info.value)
    assert TABLE_CONFLICT_HINT not in str(info.value)


def test_a_settings_and_a_whole_table_conflict_give_both_hints(
    conn: merkle.Connection,
) -> None:
    _settings_conflict(conn, "families")
    for branch, value in (("main", 1), ("br", "one")):  # field 'z': int64 and string
        conn.open_db(branch).create_table("u", key="k").write("u", [{"k": 1, "z": value}]).commit()
    with pytest.raises(MergeConflictError) as info:
        conn.merge("main", "br")
    assert set(info.value.table_conflicts) == {"t", "u"}
    assert TABLE_CONFLICT_HINT in str(info.value)
    assert SETTINGS_CONFLICT_HINT in str(info.value)
