"""`merkle merge` gives the advice that fits the conflict it found.

An adversarial probe found that the command caught every MergeConflictError
and said "pass --resolve ours or --resolve theirs", with a parenthesis
explaining both whole-table and settings conflicts (the exception did not
say which it held), even for a criss-cross merge whose bases cannot be merged
into one: there ``--resolve`` cannot work (the line even read "has conflicts
();"), and ``--base N``, which does, went unmentioned. The exception now
carries ``settings_conflicts``, ``needs_base`` and ``merge_bases``, and the
command picks its advice from them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import merkle
from merkle.errors import MergeConflictError

from .helpers import Run


def _set(meta: dict[str, str]) -> tuple[Callable[..., Any], dict[str, str]]:
    """The arguments of ``alter_table_meta``/``alter_db_meta`` that set ``meta``."""
    return (lambda _old, new: new), meta


def _branches(conn: merkle.Connection) -> merkle.Database:
    """``shop`` with tables t and u, cloned as ``dev``: the base of both."""
    db = conn.create_db("shop").create_table("t", key="k").create_table("u", key="k")
    db = db.write("t", [{"k": 1, "v": 0}]).write("u", [{"k": 1, "v": 0}]).commit()
    conn.create_db("dev", root=db)
    return db


def _criss_cross(conn: merkle.Connection) -> tuple[merkle.Database, merkle.Database]:
    """A and B (a clone) set k1 differently, then each merges the other keeping its own:
    the best merge bases of their heads, A1 and B1, conflict. Returns (A1, B1)."""
    db = conn.create_db("A").create_table("t", key="k")
    db = db.write("t", [{"k": 1, "v": 0}, {"k": 2, "v": 0}]).commit()
    conn.create_db("B", root=db)
    a1 = conn.open_db("A").write("t", [{"k": 1, "v": 1}]).commit()
    b1 = conn.open_db("B").write("t", [{"k": 1, "v": 5}]).commit()
    conn.merge(b1, "A", resolve="ours")
    conn.merge(a1, "B", resolve="ours")
    conn.open_db("B").write("t", [{"k": 3, "v": 3}]).commit()
    return a1, b1


def _unrelated_criss_cross(conn: merkle.Connection) -> None:
    """A and B created apart, each merged into the other from a named base: the best
    merge bases of their heads have no common ancestor."""
    a = conn.create_db("A").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    b = conn.create_db("B").create_table("t", key="k").write("t", [{"k": 2}]).commit()
    conn.merge(b, "A", base=0, resolve="ours")
    conn.merge(a, "B", base=0, resolve="ours")
    conn.open_db("B").write("t", [{"k": 3}]).commit()


# -- the exception says what it holds ------------------------------------------------------


def test_the_error_says_which_table_conflicts_are_of_settings(conn: merkle.Connection) -> None:
    _branches(conn)
    conn.open_db("shop").alter_table_meta("u", *_set({"o": "shop"})).alter_db_meta(
        *_set({"o": "shop"})
    ).drop_table("t").commit()
    conn.open_db("dev").alter_table_meta("u", *_set({"o": "dev"})).alter_db_meta(
        *_set({"o": "dev"})
    ).write("t", [{"k": 2, "v": 2}]).commit()
    with pytest.raises(MergeConflictError) as raised:
        conn.merge("dev", "shop")
    error = raised.value
    assert set(error.table_conflicts) == {"", "t", "u"}
    assert error.settings_conflicts == frozenset({"", "u"})  # t: dropped, a whole table
    assert not error.needs_base
    assert error.merge_bases == ()


def test_a_criss_cross_error_says_a_base_is_needed_and_names_the_bases(
    conn: merkle.Connection,
) -> None:
    a1, b1 = _criss_cross(conn)
    for resolve in ("fail", "ours", "theirs"):
        with pytest.raises(MergeConflictError) as raised:
            conn.merge("B", "A", resolve=resolve)
        assert raised.value.needs_base
        assert sorted(raised.value.merge_bases) == [("A", a1.version), ("B", b1.version)]
        assert list(raised.value.conflicts) == ["t"]  # what merging the bases found


def test_bases_that_cannot_be_merged_say_a_base_is_needed(conn: merkle.Connection) -> None:
    _unrelated_criss_cross(conn)
    with pytest.raises(MergeConflictError) as raised:
        conn.merge("B", "A", resolve="theirs")
    assert raised.value.needs_base
    assert sorted(raised.value.merge_bases) == [("A", 1), ("B", 1)]
    assert not raised.value.conflicts
    assert not raised.value.table_conflicts


def test_a_nested_criss_cross_names_the_merges_own_bases(conn: merkle.Connection) -> None:
    """The bases A2 and B2 of the merge each have the conflicting bases A1 and B1: the
    error named A1 and B1 as the merge's bases, which ``base=`` does not choose between."""
    a1, b1 = _criss_cross(conn)
    a2, b2 = conn.open_db("A"), conn.open_db("B", version=b1.version + 1)
    conn.merge(b2, "A", base=a1.version, resolve="ours")
    conn.merge(a2, "B", base=a1, resolve="ours")
    with pytest.raises(MergeConflictError) as raised:
        conn.merge("B", "A")
    bases = [("A", a2.version), ("B", b2.version)]
    assert sorted(raised.value.merge_bases) == bases
    assert f"'A' version {a2.version}" in str(raised.value)
    assert f"'B' version {b2.version}" in str(raised.value)
    assert raised.value.needs_base


# -- the command's advice -----------------------------------------------------------------


def test_key_and_settings_conflicts_name_what_each_resolve_takes(
    run: Run, conn: merkle.Connection
) -> None:
    _branches(conn)
    conn.open_db("shop").write("t", [{"k": 1, "v": 1}]).alter_table_meta(
        "u", *_set({"o": "shop"})
    ).commit()
    conn.open_db("dev").write("t", [{"k": 1, "v": 2}]).alter_table_meta(
        "u", *_set({"o": "dev"})
    ).commit()
    line = run.fails("merge", "dev", "shop")
    assert "conflicts (t: 1 keys; u: its metadata changed on both sides)" in line
    assert "--resolve ours to keep what 'shop' has or --resolve theirs to take what 'dev'" in line
    assert "of t, each takes that side's record of each conflicting key" in line
    assert "of u, each takes that side's metadata or families only" in line
    assert "whole table" not in line  # no table conflict was found
    run.ok("merge", "dev", "shop", "--resolve", "theirs")
    head = conn.open_db("shop")
    assert head.get_records("t", [1]) == {1: {"k": 1, "v": 2}}


def test_a_whole_table_conflict_says_the_table_is_taken_whole(
    run: Run, conn: merkle.Connection
) -> None:
    _branches(conn)
    conn.open_db("shop").drop_table("t").alter_db_meta(*_set({"o": "shop"})).commit()
    conn.open_db("dev").write("t", [{"k": 2, "v": 2}]).alter_db_meta(*_set({"o": "dev"})).commit()
    line = run.fails("merge", "dev", "shop")
    assert "t: dropped on our side and changed on the other" in line
    assert "of t, each takes that side's whole table" in line
    assert "of the database metadata, each takes that side's metadata" in line
    assert "metadata or families only" not in line  # no table's settings conflict
    assert "record of each conflicting key" not in line


def test_a_criss_cross_asks_for_base_not_resolve(run: Run, conn: merkle.Connection) -> None:
    a1, b1 = _criss_cross(conn)
    before = conn.open_db("A").version
    for extra in ((), ("--resolve", "ours")):
        line = run.fails("merge", "B", "A", *extra)
        assert f"'A' version {a1.version}" in line
        assert f"'B' version {b1.version}" in line
        assert "which --resolve does not settle" in line
        assert "pass --resolve" not in line
        assert "resolve=" not in line
        assert "base=" not in line
        assert "pass --base N (a version of 'A')" in line
        assert f"--base {a1.version} merges from that version of 'A'" in line
    assert conn.open_db("A").version == before  # nothing committed
    assert "merged 'B' into 'A'" in run.ok("merge", "B", "A", "--base", str(a1.version)).stdout


def test_bases_that_cannot_be_merged_ask_for_base(run: Run, conn: merkle.Connection) -> None:
    _unrelated_criss_cross(conn)
    line = run.fails("merge", "B", "A", "--resolve", "theirs")
    assert "cannot be merged into one: they have no common ancestor in the journals" in line
    assert "has conflicts ()" not in line
    assert "pass --resolve" not in line
    assert "base=" not in line
    assert "--base 1 merges from that version of 'A'" in line
    # From A's version 1, t of B is another table (created apart): a whole-table conflict.
    assert "whole table" in run.fails("merge", "B", "A", "--base", "1")
    run.ok("merge", "B", "A", "--base", "1", "--resolve", "theirs")
    assert {r["k"] for r in conn.open_db("A").scan("t")} == {1, 2, 3}
