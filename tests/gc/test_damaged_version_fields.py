"""A format version no merkle-db writes is damage, not a newer format.

A ``v`` field that is missing, not an integer, or below 1 was reported as "has
format version None; upgrade merkle-db to read it": advice no upgrade could
follow, and it kept the damaged-object remedies away (``set_retention``
replaces a damaged policy, ``drop_db`` writes over a damaged head entry, and
``list_dbs`` lists the other databases; each acts on damage only). Found by a
regression probe of the damaged-objects change. A ``v`` above the versions
read is still an upgrade.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Lake
from gc_helpers import connect

from merkle.blocks.codec import check_node, decode_node, encode_node
from merkle.errors import IntegrityError
from merkle.gc import get_policy, set_retention
from merkle.gc.policy import POLICY_KEY, PolicyDamagedError
from merkle.refs import JournalEntryDamagedError
from merkle.refs.entry import entry_key

NOT_WRITTEN = [None, 0, -1, "1", True]


@pytest.mark.parametrize("version", NOT_WRITTEN)
def test_a_version_no_merkle_db_writes_is_malformed(version: Any) -> None:
    node = {"type": "merkle/table", "v": version}
    if version is None:
        del node["v"]
    with pytest.raises(IntegrityError, match="malformed") as caught:
        check_node(node, "merkle/table", where="root")
    assert "upgrade" not in str(caught.value)


def test_a_newer_version_still_asks_for_an_upgrade() -> None:
    with pytest.raises(IntegrityError, match="upgrade merkle-db"):
        check_node({"type": "merkle/table", "v": 2}, "merkle/table", where="root")


def _rewrite(conn: Any, key: str, change: Any) -> None:
    node = decode_node(conn.store.get(key))
    change(node)
    conn.store.put(key, encode_node(node))


@pytest.mark.parametrize("version", NOT_WRITTEN)
def test_a_policy_with_a_damaged_version_is_damage_that_set_retention_replaces(
    lake: Lake, version: Any
) -> None:
    with connect(lake) as conn:
        conn.create_db("a")
        set_retention(conn, keep_versions=3)
        _rewrite(conn, POLICY_KEY, lambda n: n.pop("v") if version is None else n.update(v=version))
        with pytest.raises(PolicyDamagedError):
            get_policy(conn)
        set_retention(conn, keep_versions=2)
        assert get_policy(conn).default.keep_versions == 2


@pytest.mark.parametrize("version", NOT_WRITTEN)
def test_a_head_entry_with_a_damaged_version_takes_the_damaged_head_remedies(
    lake: Lake, version: Any
) -> None:
    with connect(lake) as conn:
        db = conn.create_db("a").create_table("t", key="k").commit()
        db = db.write("t", [{"k": 1}]).commit()
        conn.create_db("b")
        key = entry_key("a", db.version)
        _rewrite(conn, key, lambda n: n.pop("v") if version is None else n.update(v=version))
    with connect(lake) as fresh:
        with pytest.raises(JournalEntryDamagedError):
            fresh.open_db("a")
        assert fresh.list_dbs() == ["a", "b"]
        assert fresh.open_db("a", version=db.version - 1).list_tables() == ["t"]
        fresh.drop_db("a")
        assert fresh.list_dbs() == ["b"]
