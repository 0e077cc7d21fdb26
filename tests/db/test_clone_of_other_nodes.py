"""A clone from the CID of a table root or a tablet, not a database root, is a usage
mistake, said as one (before: IntegrityError, the error of damaged blocks)."""

from __future__ import annotations

import pytest

import merkle
from merkle.errors import IntegrityError, UsageError


def test_a_clone_from_a_table_root_is_a_usage_error() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
    table_root = str(db._table("t").save())
    with pytest.raises(UsageError, match="merkle/table node, not a database root") as caught:
        conn.create_db("copy", root=table_root)
    assert not isinstance(caught.value, IntegrityError)
    assert "copy" not in conn.list_dbs()
    assert conn.create_db("copy", root=db.root).to_arrow("t").num_rows == 1
