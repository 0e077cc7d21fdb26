"""Two points of the public contract (API.md) an outside test suite checks.

- ``conn.merge(source, into, base=None, resolve="fail")``: API.md shows
  ``base`` and ``resolve`` as positional-or-keyword; they were keyword-only,
  so ``conn.merge("dev", "shop", None, "theirs")`` was a TypeError.
- ``create_db`` commits version 0, except for a name dropped before: its
  journal continues (version head + 1), so old version numbers keep naming
  the dropped database's roots; doc/api.md now says so.
"""

from __future__ import annotations

import merkle


def _lake() -> merkle.Connection:
    conn = merkle.connect("memory://")
    conn.create_db("shop").create_table("t", key="k").write("t", [{"k": 1, "v": 1}]).commit()
    conn.create_db("dev", root=conn.open_db("shop"))
    conn.open_db("dev").write("t", [{"k": 1, "v": 2}]).commit()
    conn.open_db("shop").write("t", [{"k": 1, "v": 3}]).commit()
    return conn


def test_merge_takes_base_and_resolve_by_position() -> None:
    conn = _lake()
    merged = conn.merge("dev", "shop", None, "theirs")
    assert merged.get_records("t", [1]) == {1: {"k": 1, "v": 2}}


def test_merge_takes_base_and_resolve_by_keyword() -> None:
    conn = _lake()
    merged = conn.merge("dev", "shop", base=None, resolve="ours")
    assert merged.get_records("t", [1]) == {1: {"k": 1, "v": 3}}


def test_a_name_dropped_before_continues_its_journal() -> None:
    conn = merkle.connect("memory://")
    conn.create_db("shop").create_table("old", key="k").commit()
    dropped_at = conn.history("shop")[0].version
    conn.drop_db("shop")
    again = conn.create_db("shop")
    assert again.version == dropped_at + 2  # head + 1, the drop being the head
    assert again.list_tables() == []
    assert conn.open_db("shop", version=dropped_at).list_tables() == ["old"]
    fresh = conn.create_db("other")
    assert fresh.version == 0
