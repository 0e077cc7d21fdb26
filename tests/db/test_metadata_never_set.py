"""A metadata function on metadata never set is given an empty map.

API.md lists ``metadata={}`` as the default of ``create_db`` and
``create_table``; what is stored when none is given is nothing (None), and a
metadata function was given that None, so the natural ``lambda m: {**m,
"x": 1}`` raised a bare TypeError. It is given ``{}`` now, and returning it
unchanged changes nothing (no version).
"""

from __future__ import annotations

import merkle


def _db() -> merkle.Database:
    conn = merkle.connect("memory://")
    return conn.create_db("d").create_table("t", key="k").commit()


def test_a_db_metadata_function_on_none_gets_an_empty_map() -> None:
    db = _db()
    assert db.metadata is None
    changed = db.alter_db_meta(lambda m: {**m, "owner": "ops"}).commit()
    assert changed.metadata == {"owner": "ops"}
    assert changed.version == db.version + 1


def test_a_table_metadata_function_on_none_gets_an_empty_map() -> None:
    db = _db()
    changed = db.alter_table_meta("t", lambda m: {**m, "unit": "kg"}).commit()
    assert changed.describe_table("t")["metadata"] == {"unit": "kg"}


def test_returning_the_empty_map_given_changes_nothing() -> None:
    db = _db()
    assert db.alter_db_meta(lambda m: m).commit().version == db.version
    assert db.alter_table_meta("t", lambda m: dict(m)).commit().version == db.version
