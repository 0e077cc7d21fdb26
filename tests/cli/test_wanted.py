"""What the command line needs from the Python API and does not get yet.

Strict xfails: each one passes (and so fails as XPASS) once the API offers it;
then the command line can use it and the marker goes.
"""

from __future__ import annotations

import pytest

import merkle


@pytest.mark.xfail(
    strict=True,
    raises=TypeError,
    reason="Connection.create_db/drop_db take no message/author, so `merkle db create/clone/"
    "drop` cannot record them (RefManager.commit/clone/drop already accept both)",
)
def test_create_and_drop_db_record_a_message_and_author(conn: merkle.Connection) -> None:
    conn.create_db("shop", message="create shop", author="ann")  # type: ignore[call-arg]
    conn.create_db("dev", root=conn.open_db("shop"), message="clone", author="ann")  # type: ignore[call-arg]
    conn.drop_db("dev", message="drop dev", author="bob")  # type: ignore[call-arg]
    assert [(e.message, e.author) for e in conn.history("dev")] == [
        ("drop dev", "bob"),
        ("clone", "ann"),
    ]
    assert conn.history("shop")[0].message == "create shop"
