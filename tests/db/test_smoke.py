"""A whole session through the public API on every backend."""

from __future__ import annotations

import pytest
from conftest import Lake

import merkle
from merkle.errors import NotFoundError


def test_session(lake: Lake) -> None:
    conn = merkle.connect(lake.uri, **lake.options)
    db = conn.create_db("shop", metadata={"owner": "ops"})
    db = db.create_table("orders", key="order_id")
    db = db.write("orders", [{"order_id": i, "sku": f"s{i}", "qty": i % 3} for i in range(50)])
    assert db.get_records("orders", [1])[1] == {"order_id": 1, "sku": "s1", "qty": 1}
    v1 = db.commit(message="load")
    assert v1.version == 1
    v2 = v1.write("orders", {5: {"qty": 99}}).delete("orders", [6]).commit(author="me")
    assert v2.get_records("orders", [5, 6]) == {5: {"order_id": 5, "qty": 99}}
    assert conn.open_db("shop", version=1).get_records("orders", [6])[6]["sku"] == "s6"
    clone = conn.create_db("dev", root=v2).write("orders", [{"order_id": 1000}]).commit()
    assert clone.describe()["tables"]["orders"]["count"] == 50
    assert conn.open_db("shop").describe()["tables"]["orders"]["count"] == 49
    assert [h.version for h in conn.history("shop")] == [2, 1, 0]
    conn.drop_db("dev")
    assert conn.list_dbs() == ["shop"]
    with pytest.raises(NotFoundError):
        conn.open_db("dev")
    again = merkle.connect(lake.uri, **lake.options) if lake.kind != "memory" else conn
    assert [r["order_id"] for r in again.open_db("shop").scan("orders", limit=3)] == [0, 1, 2]


def test_committing_a_value_twice_makes_one_version() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("shop").create_table("t", key="k").write("t", [{"k": 1}])
    first = db.commit()
    again = db.commit()
    assert again is first
    assert [h.version for h in conn.history("shop")] == [1, 0]
