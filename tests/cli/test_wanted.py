"""What the command line needs from the Python API and does not get yet.

Each was a strict xfail until the API offered it; kept as a regression test.
"""

from __future__ import annotations

import merkle


def test_create_and_drop_db_record_a_message_and_author(conn: merkle.Connection) -> None:
    conn.create_db("shop", message="create shop", author="ann")
    conn.create_db("dev", root=conn.open_db("shop"), message="clone", author="ann")
    conn.drop_db("dev", message="drop dev", author="bob")
    assert [(e.message, e.author) for e in conn.history("dev")] == [
        ("drop dev", "bob"),
        ("clone", "ann"),
    ]
    assert conn.history("shop")[0].message == "create shop"
