"""Diff and merge of a database with many tables cost the tables, not their square.

Before: ``diff_databases`` and the merge asked ``name in db.list_tables()``
for every table, and ``list_tables`` builds and sorts the whole list each
time: a diff of a one-row commit took 0.14 s at 500 tables, 2.7 s at 2,000
and 14 s at 4,000, and ``merkle db log --limit 5`` 13.8 s on a 2,000-table
database. Now each asks ``has_table`` (one lookup); the tests count the
listings, which do not grow with the tables.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import merkle
from merkle.db.database import Database

TABLES = 300


@pytest.fixture
def wide_db() -> Iterator[merkle.Database]:
    with merkle.connect("memory://") as conn:
        db = conn.create_db("d")
        for i in range(TABLES):
            db = db.create_table(f"t{i}", key="k")
        yield db.write("t0", [{"k": 1}]).commit()


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = Database.list_tables

    def counted(self: Database) -> list[str]:
        calls.append(1)
        return real(self)

    monkeypatch.setattr(Database, "list_tables", counted)
    return calls


def test_a_diff_lists_the_tables_a_fixed_number_of_times(
    wide_db: merkle.Database, listings: list[int]
) -> None:
    head = wide_db.write("t0", [{"k": 2}]).commit()
    listings.clear()
    diff = head.diff(head.version - 1)
    assert diff.summary()["rows"] == {"t0": {"inserted": 1, "updated": 0, "deleted": 0}}
    assert len(listings) <= 4, len(listings)  # 2 now; one per table (300+) before


def test_a_merge_lists_the_tables_a_fixed_number_of_times(
    wide_db: merkle.Database, listings: list[int]
) -> None:
    conn = wide_db._conn
    conn.create_db("side", root=wide_db).write("t1", [{"k": 9}]).commit()
    wide_db.write("t2", [{"k": 8}]).commit()
    listings.clear()
    merged = conn.merge("side", "d")
    assert merged.get_records("t1", [9]) == {9: {"k": 9}}
    assert merged.get_records("t2", [8]) == {8: {"k": 8}}
    assert len(listings) <= 6, len(listings)  # 3 now; about two per table before


def test_has_table_follows_creates_and_drops(wide_db: merkle.Database) -> None:
    assert wide_db.has_table("t5")
    assert not wide_db.has_table("t5000")
    dropped = wide_db.drop_table("t5")
    assert not dropped.has_table("t5")
    assert dropped.create_table("t5", key="k").has_table("t5")
    assert dropped.commit().has_table("t6")
