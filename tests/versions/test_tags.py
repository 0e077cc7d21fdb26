"""Tags: naming versions, opening them, and the errors around them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import Lake

import merkle
from merkle.errors import IntegrityError, NotFoundError, UsageError
from merkle.refs.tags import tag_key


@pytest.fixture
def conn(lake: Lake) -> Iterator[merkle.Connection]:
    with merkle.connect(lake.uri, **lake.options) as opened:
        yield opened


def _history(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("shop").create_table("t", key="k")
    for i in range(3):
        db = db.write("t", [{"k": i}]).commit()
    return db


def test_tag_open_list_delete(conn: merkle.Connection) -> None:
    db = _history(conn)
    made = conn.tag("shop", "release-1", version=2, message="ship it", author="ann")
    assert (made.version, made.root) == (2, conn.open_db("shop", version=2).root)
    conn.tag("shop", "head")
    assert [t.name for t in conn.tags("shop")] == ["head", "release-1"]
    assert conn.tags("shop")[0].version == db.version
    opened = conn.open_db("shop", tag="release-1")
    assert opened.version == 2
    assert [r["k"] for r in opened.scan("t")] == [0, 1]
    with pytest.raises(UsageError, match="already names version 2"):
        conn.tag("shop", "release-1", version=3)
    assert conn.delete_tag("shop", "release-1").version == 2
    with pytest.raises(NotFoundError, match="no tag"):
        conn.open_db("shop", tag="release-1")
    with pytest.raises(NotFoundError):
        conn.delete_tag("shop", "release-1")


def test_bad_tags_are_refused(conn: merkle.Connection) -> None:
    _history(conn)
    with pytest.raises(UsageError, match="invalid tag name"):
        conn.tag("shop", "a/b")
    with pytest.raises(NotFoundError):
        conn.tag("shop", "x", version=99)
    with pytest.raises(NotFoundError):
        conn.tag("nothing", "x")
    with pytest.raises(UsageError):
        conn.open_db("shop", version=1, tag="x")
    conn.drop_db("shop")
    with pytest.raises(NotFoundError):
        conn.tag("shop", "dropped")


def test_a_damaged_tag_is_an_integrity_error(conn: merkle.Connection) -> None:
    _history(conn)
    conn.tag("shop", "t1", version=1)
    conn.store.put(tag_key("shop", "t1"), b"\xa1\x61x\x01")
    with pytest.raises(IntegrityError, match="tag object"):
        conn.open_db("shop", tag="t1")
    # verify reports it (it raised); the way out the error names works (it raised too).
    report = merkle.verify(conn)
    assert not report.ok
    assert [(db, "tag object" in problem) for db, problem in report.journals_damaged] == [
        ("shop", True)
    ]
    assert conn.delete_tag("shop", "t1") is None
    assert conn.tags("shop") == []
    assert merkle.verify(conn).ok


def test_tags_of_a_database_that_never_existed_is_not_found(conn: merkle.Connection) -> None:
    """`conn.tags("typo")` once returned [], as for a database without tags."""
    conn.create_db("shop")
    assert conn.tags("shop") == []
    with pytest.raises(NotFoundError, match="'shpo' does not exist"):
        conn.tags("shpo")
    conn.tag("shop", "kept")
    conn.drop_db("shop")
    assert [t.name for t in conn.tags("shop")] == ["kept"]  # a dropped database keeps its tags
