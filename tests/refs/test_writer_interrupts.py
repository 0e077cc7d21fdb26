"""A Ctrl-C in a commit gives back its use of the connection's writer lease.

A commit counted its use of the lease before entering the ``try`` that gives
it back: an interrupt in between (right after a new lease was acquired, or
right after the session's lease was taken for reuse) left the lease counted
as in use for the life of the process, renewed by the connection's thread,
and every collection (on any connection) waited ``writer_wait`` for it and
deleted nothing (threads probe of the twenty-third session).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import merkle
from merkle.refs.writer import WriterSession


def _interrupt_once(real: Callable[..., Any]) -> Callable[..., Any]:
    armed = [True]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt  # = Ctrl-C delivered right after the call returned
        return result

    return wrapper


@pytest.mark.parametrize(
    ("reused", "where"),
    [(False, "_acquire"), (False, "_ensure_thread"), (True, "_ensure_thread")],
    ids=["new-lease-acquired", "new-lease-registered", "session-lease-taken"],
)
def test_an_interrupted_commit_leaves_no_writer_lease_in_use(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, where: str, reused: bool
) -> None:
    with merkle.connect(f"file://{tmp_path}") as conn:
        db = conn.create_db("x").create_table("t", key="k").commit()
        if not reused:
            conn._writer.release_idle()  # the next commit acquires a new lease
        monkeypatch.setattr(WriterSession, where, _interrupt_once(getattr(WriterSession, where)))
        with pytest.raises(KeyboardInterrupt):
            db.write("t", [{"k": 1}]).commit()
        monkeypatch.undo()
        conn._writer.release_idle()
        assert conn.leases.lease_holders("writer") == [], "the lease is idle and given up"
        db = conn.open_db("x").write("t", [{"k": 2}]).commit()  # the connection still writes
        assert [r["k"] for r in db.scan("t")] == [2]
        conn._writer.release_idle()
        report = merkle.gc(conn, grace="0s", writer_wait=0)
        assert report.sweep_skipped is None
