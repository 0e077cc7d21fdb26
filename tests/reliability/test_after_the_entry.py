"""A store failure after the journal entry was put never reads as "nothing happened".

Before: a commit (or a create, clone or drop) whose entry was put, and whose
check for a racing garbage collection then failed to read the GC lock,
raised the read's ``StorageError(definite=True)``, whose documented meaning
is "surely did not take effect; safe to try again". A caller that retried
applied the transaction twice (found on S3 by a fault proxy answering list
requests with 500 after the entry's PUT). It is now a
``CommitIndeterminateError`` naming the version, and the journal holds it.
A failure before the entry is still the store's own error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import merkle
from merkle.errors import CommitIndeterminateError, StorageError


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as opened:
        yield opened


def _lock_reads_fail(conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of the GC lock after a journal put fails, definitely, as a refused
    request would."""

    def passed(ticket: Any) -> bool:
        raise StorageError("S3 list of 'gc/lock/' failed: InternalError (HTTP 500)", definite=True)

    monkeypatch.setattr(conn._writer, "passed", passed)


def _entries(conn: merkle.Connection, name: str) -> list[int]:
    return [entry.version for entry in conn.history(name)]


def test_a_commit_whose_entry_was_put_is_indeterminate_not_refused(
    conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = conn.create_db("acct").create_table("t", key="k").write("t", [{"k": 1, "v": 100}])
    db = db.commit()
    _lock_reads_fail(conn, monkeypatch)
    with pytest.raises(CommitIndeterminateError, match="version 2 of database 'acct' was put"):
        db.write("t", [{"k": 1, "v": 110}]).commit(message="deposit 10")
    assert _entries(conn, "acct") == [2, 1, 0]
    assert conn.open_db("acct").get_records("t", [1]) == {1: {"k": 1, "v": 110}}


@pytest.mark.parametrize(
    "step",
    [
        pytest.param(lambda conn: conn.create_db("new"), id="create"),
        pytest.param(lambda conn: conn.create_db("new", root=conn.open_db("acct")), id="clone"),
        pytest.param(
            lambda conn: conn.create_db("new", root=conn.open_db("acct").root), id="clone-by-root"
        ),
    ],
)
def test_a_create_or_clone_whose_entry_was_put_is_indeterminate(
    conn: merkle.Connection,
    monkeypatch: pytest.MonkeyPatch,
    step: Callable[[merkle.Connection], Any],
) -> None:
    conn.create_db("acct").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    _lock_reads_fail(conn, monkeypatch)
    with pytest.raises(CommitIndeterminateError, match="version 0 of database 'new' was put"):
        step(conn)
    assert _entries(conn, "new") == [0]


def test_a_drop_whose_entry_was_put_is_indeterminate(
    conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn.create_db("gone")
    _lock_reads_fail(conn, monkeypatch)
    with pytest.raises(CommitIndeterminateError, match="version 1 of database 'gone' was put"):
        conn.drop_db("gone")
    assert "gone" not in conn.list_dbs()


def test_a_failure_before_the_entry_is_still_the_stores_own_error(
    conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = conn.create_db("acct").create_table("t", key="k").write("t", [{"k": 1}]).commit()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise StorageError("refused", definite=True)

    monkeypatch.setattr(conn.refs, "commit", refuse)
    with pytest.raises(StorageError) as caught:
        db.write("t", [{"k": 2}]).commit()
    assert caught.value.definite
    assert not isinstance(caught.value, CommitIndeterminateError)
    assert _entries(conn, "acct") == [1, 0]
