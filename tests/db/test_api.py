"""Every call of the Python API (API.md "Python", all but ``merkle.gc``) on every backend.

Each test runs on memory://, file:// and s3:// (a moto server over real
HTTP) through the ``lake`` fixture, and checks what the call returns and
what a later reader sees, usually through a second connection or after a
commit and a re-open.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest
from conftest import Lake

import merkle
from merkle.blocks.cid import CID
from merkle.errors import NotFoundError, UsageError

from .conftest import Connect
from .helpers import all_tables, full_scan, same_columns, snapshot

# -- connect, list_dbs, create_db, open_db, history, drop_db ---------------------------


def test_connect_returns_a_connection_to_an_empty_lake(lake: Lake, connect: Connect) -> None:
    conn = connect(lake)
    assert isinstance(conn, merkle.Connection)
    assert conn.list_dbs() == []


def test_list_dbs_is_sorted_and_only_live(conn: merkle.Connection) -> None:
    for name in ["zeta", "alpha", "mid"]:
        conn.create_db(name)
    assert conn.list_dbs() == ["alpha", "mid", "zeta"]
    conn.drop_db("mid")
    assert conn.list_dbs() == ["alpha", "zeta"]


def test_create_db_commits_version_0_with_metadata(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    db = conn.create_db("shop", metadata={"owner": "ops", "tags": [1, 2]})
    assert (db.name, db.version) == ("shop", 0)
    assert db.list_tables() == []
    assert db.describe()["metadata"] == {"owner": "ops", "tags": [1, 2]}
    [entry] = conn.history("shop")
    assert (entry.version, entry.root) == (0, db.root)
    # Committed at once: another client sees it.
    other = connect(lake).open_db("shop")
    assert (other.version, other.root) == (0, db.root)
    assert other.describe()["metadata"] == {"owner": "ops", "tags": [1, 2]}


def test_create_db_that_exists_is_a_usage_error(conn: merkle.Connection) -> None:
    conn.create_db("shop", metadata={"a": 1})
    with pytest.raises(UsageError, match="'shop'"):
        conn.create_db("shop", metadata={"a": 2})
    assert conn.open_db("shop").describe()["metadata"] == {"a": 1}
    assert [e.version for e in conn.history("shop")] == [0]


def _three_versions(conn: merkle.Connection) -> list[merkle.Database]:
    db0 = conn.create_db("shop")
    db1 = db0.create_table("t", key="k").write("t", [{"k": 1, "v": "one"}]).commit()
    db2 = db1.write("t", [{"k": 2, "v": "two"}]).commit()
    db3 = db2.delete("t", [1]).commit()
    return [db0, db1, db2, db3]


def test_open_db_head_and_past_versions(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    versions = _three_versions(conn)
    other = connect(lake)
    head = other.open_db("shop")
    assert (head.version, head.root) == (3, versions[3].root)
    assert full_scan(head, "t") == [{"k": 2, "v": "two"}]
    for n, db in enumerate(versions):
        past = other.open_db("shop", version=n)
        assert (past.name, past.version, past.root) == ("shop", n, db.root)
    assert other.open_db("shop", version=0).list_tables() == []
    assert full_scan(other.open_db("shop", version=1), "t") == [{"k": 1, "v": "one"}]
    assert full_scan(other.open_db("shop", version=2), "t") == [
        {"k": 1, "v": "one"},
        {"k": 2, "v": "two"},
    ]


@pytest.fixture
def far_timezone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run with the process's local time zone at UTC+05:30, so local != UTC."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        yield
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.usefixtures("far_timezone")
def test_open_db_at_takes_naive_datetimes_as_utc(conn: merkle.Connection) -> None:
    versions = _three_versions(conn)
    entries = sorted(conn.history("shop"), key=lambda e: e.version)
    assert [e.version for e in entries] == [0, 1, 2, 3]

    def expected(when: datetime) -> int:
        return max(e.version for e in entries if e.time <= when)

    for entry in entries:
        aware = entry.time
        assert aware.utcoffset() == timedelta(0)
        naive = aware.replace(tzinfo=None)
        assert conn.open_db("shop", at=naive).version == expected(aware)
        assert conn.open_db("shop", at=aware).version == expected(aware)
        # The same instant in another zone names the same version.
        india = aware.astimezone(timezone(timedelta(hours=5, minutes=30)))
        assert conn.open_db("shop", at=india).version == expected(aware)
    # Between two commits: the earlier one.
    for before, after in itertools.pairwise(entries):
        if after.time > before.time + timedelta(microseconds=1):
            mid = before.time + (after.time - before.time) / 2
            got = conn.open_db("shop", at=mid.replace(tzinfo=None))
            assert got.version == expected(mid)
            assert got.root == versions[got.version].root
    now = datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=1)
    assert conn.open_db("shop", at=now).version == 3


def test_history_newest_first_with_message_and_author(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    db = conn.create_db("shop")
    db = db.create_table("t", key="k").commit(message="make t", author="ana")
    db = db.write("t", [{"k": 1}]).commit(message="load")
    db = db.write("t", [{"k": 2}]).commit(author="bo")
    history = connect(lake).history("shop")
    assert [e.version for e in history] == [3, 2, 1, 0]
    assert [(e.message, e.author) for e in history] == [
        (None, "bo"),
        ("load", None),
        ("make t", "ana"),
        (None, None),
    ]
    assert history[0].root == db.root
    for entry in history:
        assert entry.root == conn.open_db("shop", version=entry.version).root
        assert isinstance(entry.time, datetime)
        assert entry.time.utcoffset() == timedelta(0)
        CID.parse(entry.root)  # a CID string
    times = [e.time for e in reversed(history)]
    assert times == sorted(times)


def test_history_limit(conn: merkle.Connection) -> None:
    _three_versions(conn)
    assert [e.version for e in conn.history("shop", limit=2)] == [3, 2]


def test_drop_db_keeps_history_and_allows_a_new_one(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    versions = _three_versions(conn)
    conn.create_db("other")
    conn.drop_db("shop")
    other = connect(lake)
    assert other.list_dbs() == ["other"]
    with pytest.raises(NotFoundError, match="'shop'"):
        other.open_db("shop")
    # History and blocks stay until GC: past versions still read.
    assert [e.version for e in other.history("shop")][1:] == [3, 2, 1, 0]
    assert other.history("shop")[0].root is None
    assert full_scan(other.open_db("shop", version=3), "t") == full_scan(versions[3], "t")
    with pytest.raises(NotFoundError, match="'shop'"):
        other.drop_db("shop")
    fresh = other.create_db("shop", metadata={"again": True})
    assert fresh.list_tables() == []
    assert connect(lake).open_db("shop").describe()["metadata"] == {"again": True}
    assert connect(lake).list_dbs() == ["other", "shop"]


# -- identity, describe, metadata, commit --------------------------------------------


def test_name_version_root(conn: merkle.Connection) -> None:
    db = conn.create_db("shop")
    assert db.name == "shop"
    assert db.version == 0
    CID.parse(db.root)
    changed = db.create_table("t", key="k").write("t", [{"k": 1}])
    # An uncommitted value names the committed version it is based on.
    assert (changed.version, changed.root) == (0, db.root)
    committed = changed.commit()
    assert committed.version == 1
    assert committed.root != db.root
    assert committed.root == conn.history("shop")[0].root


def test_describe(lake: Lake, conn: merkle.Connection, connect: Connect) -> None:
    db = conn.create_db("shop", metadata={"owner": "ops"})
    db = db.create_table("a", key="k").create_table("b", key="k")
    db = db.write("a", [{"k": i, "v": "x" * i} for i in range(10)]).commit()
    described = connect(lake).open_db("shop").describe()
    assert set(described) == {"id", "name", "version", "tables", "updated_at", "metadata"}
    assert described["id"] == db.root
    assert described["name"] == "shop"
    assert described["version"] == 1
    assert described["metadata"] == {"owner": "ops"}
    assert set(described["tables"]) == {"a", "b"}
    assert described["tables"]["a"]["count"] == 10
    assert described["tables"]["a"]["size"] > 0
    assert described["tables"]["b"] == {"count": 0, "size": 0}
    assert isinstance(described["updated_at"], datetime)
    assert described["updated_at"].utcoffset() == timedelta(0)


def test_alter_db_meta(lake: Lake, conn: merkle.Connection, connect: Connect) -> None:
    db = conn.create_db("shop", metadata={"owner": "ops"})

    def put(meta: dict[str, object], key: str, value: object) -> dict[str, object]:
        return {**meta, key: value}

    changed = db.alter_db_meta(put, "team", "data").alter_db_meta(put, "n", 2)
    assert changed.describe()["metadata"] == {"owner": "ops", "team": "data", "n": 2}
    assert db.describe()["metadata"] == {"owner": "ops"}
    assert connect(lake).open_db("shop").describe()["metadata"] == {"owner": "ops"}
    committed = changed.commit()
    assert committed.version == 1
    assert connect(lake).open_db("shop").describe()["metadata"] == {
        "owner": "ops",
        "team": "data",
        "n": 2,
    }


def test_commit_returns_the_next_version(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="k")
    committed = db.commit(message="first", author="me")
    assert committed.version == 1
    assert not committed.dirty
    assert committed.list_tables() == ["t"]
    entry = conn.history("shop")[0]
    assert (entry.version, entry.message, entry.author, entry.root) == (
        1,
        "first",
        "me",
        committed.root,
    )


def test_noop_commit_returns_db_unchanged(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="k").commit()
    before = snapshot(conn.store)
    assert db.commit() is db
    assert db.commit(message="nothing", author="me") is db
    # Writes that change nothing record nothing either.
    assert db.write("t", []) is db
    assert db.delete("t", []) is db
    assert snapshot(conn.store).journal == before.journal
    assert [e.version for e in conn.history("shop")] == [1, 0]


@pytest.mark.parametrize("as_arrow", [True, False], ids=["arrow", "records"])
def test_a_commit_that_only_flips_the_sign_of_zero_is_kept(
    conn: merkle.Connection, as_arrow: bool
) -> None:
    """Arrow compares -0.0 equal to 0.0: the no-change check must compare bits, or
    the commit is dropped and the new value lost."""
    db = conn.create_db("shop").create_table("t", key="k")
    db = db.write("t", pa.table({"k": [1, 2], "v": [0.0, 1.5]})).commit()
    rows = pa.table({"k": [1], "v": [-0.0]}) if as_arrow else [{"k": 1, "v": -0.0}]
    done = db.write("t", rows).commit()
    assert done.version == db.version + 1
    value = conn.open_db("shop").get_records("t", [1])[1]["v"]
    assert math.copysign(1.0, value) == -1.0
    counts = done.diff(db.version)["t"].counts()
    assert (counts.inserted, counts.updated, counts.deleted) == (0, 1, 0)


def test_writing_the_same_nan_again_changes_nothing(conn: merkle.Connection) -> None:
    """NaN equals no NaN in Arrow: rewriting a row that holds one made a new, empty
    version every time."""
    db = conn.create_db("shop").create_table("t", key="k")
    rows = pa.table({"k": [1, 2], "v": [float("nan"), 2.0], "w": [[float("nan")], None]})
    db = db.write("t", rows).commit()
    assert db.write("t", rows).commit().version == db.version
    assert db.write("t", rows.slice(1)).commit().version == db.version
    assert max(e.version for e in conn.history("shop")) == db.version


# -- tables --------------------------------------------------------------------------


def test_create_table_with_every_option(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    db = conn.create_db("shop")
    db = db.create_table(
        "orders",
        key="order_id",
        key_codec="int",
        families={"items": {"sku", "qty"}},
        metadata={"source": "erp"},
        tablet_size_limit=8,
        branching_factor=3,
        patch_limit=4,
        patch_share=10,
    )
    db.commit()
    for view in (db, connect(lake).open_db("shop")):
        described = view.describe_table("orders")
        assert described["name"] == "orders"
        assert described["key"] == "order_id"
        assert described["key_codec"] == "int"
        assert described["families"] == {"items": ["qty", "sku"]}
        assert described["metadata"] == {"source": "erp"}
        assert described["limits"] == {
            "tablet_size_limit": 8,
            "branching_factor": 3,
            "patch_limit": 4,
            "patch_share": 10,
        }
        assert (described["count"], described["size"], described["tablets"]) == (0, 0, 0)
        assert described["patch"] == {"count": 0, "size": 0}


def test_create_table_infers_the_key_codec_from_the_first_write(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="name")
    assert db.describe_table("t")["key_codec"] is None
    db = db.write("t", [{"name": "b"}, {"name": "a"}]).commit()
    assert db.describe_table("t")["key_codec"] == "str"
    assert [r["name"] for r in db.scan("t")] == ["a", "b"]


def test_create_table_with_a_tuple_key(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="k", key_codec="tuple(str,reverse(int))")
    keys = [("a", 1), ("a", 3), ("b", 0), ("a", 2), ("ab", 5)]
    db = db.write("t", [{"k": k, "n": i} for i, k in enumerate(keys)]).commit()
    assert [r["k"] for r in db.scan("t")] == [("a", 3), ("a", 2), ("a", 1), ("ab", 5), ("b", 0)]
    assert db.get_records("t", [("a", 2)]) == {("a", 2): {"k": ("a", 2), "n": 3}}


def test_describe_table(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table(
        "t", key="k", tablet_size_limit=10, branching_factor=3, patch_limit=20
    )
    db = db.write("t", [{"k": i, "v": i} for i in range(100)]).commit()
    described = db.describe_table("t")
    assert {"id", "name", "tablets", "count", "size", "patch", "families", "metadata"} <= set(
        described
    )
    CID.parse(described["id"])
    assert described["count"] == 100
    assert described["tablets"] == len(db.list_tablets("t")) >= 10
    assert described["patch"] == {"count": 0, "size": 0}
    pending = db.write("t", [{"k": 1000 + i} for i in range(5)]).delete("t", [0, 1])
    pd = pending.describe_table("t")
    assert pd["count"] == 103
    assert pd["patch"]["count"] == 7
    assert pd["patch"]["size"] > 0
    assert pd["tablets"] == described["tablets"]
    assert pd["id"] != described["id"]
    committed = pending.commit()
    assert committed.describe_table("t") == pd


def test_alter_table_meta(lake: Lake, conn: merkle.Connection, connect: Connect) -> None:
    db = conn.create_db("shop").create_table("t", key="k", metadata={"v": 1})
    db = db.write("t", [{"k": 1}]).commit()
    changed = db.alter_table_meta("t", lambda meta, n: {**meta, "v": meta["v"] + n}, 41)
    assert changed.describe_table("t")["metadata"] == {"v": 42}
    assert db.describe_table("t")["metadata"] == {"v": 1}
    changed.commit()
    reopened = connect(lake).open_db("shop")
    assert reopened.describe_table("t")["metadata"] == {"v": 42}
    assert full_scan(reopened, "t") == [{"k": 1}]


def test_alter_families_keeps_the_data(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    db = conn.create_db("shop").create_table(
        "t", key="k", families={"f": {"a"}}, tablet_size_limit=10, patch_limit=5
    )
    records = [{"k": i, "a": i, "b": str(i), "c": [i]} for i in range(50)]
    db = db.write("t", records).write("t", [{"k": 99, "b": "pending"}]).commit()
    changed = db.alter_families("t", {"f": {"a", "b"}, "g": {"c"}})
    assert changed.describe_table("t")["families"] == {"f": ["a", "b"], "g": ["c"]}
    assert db.describe_table("t")["families"] == {"f": ["a"]}
    changed.commit()
    reopened = connect(lake).open_db("shop")
    assert reopened.describe_table("t")["families"] == {"f": ["a", "b"], "g": ["c"]}
    expected = [*records, {"k": 99, "b": "pending"}]
    assert full_scan(reopened, "t") == expected
    assert list(reopened.scan("t", fields=["c"])) == [
        {"k": r["k"], "c": r["c"]} if "c" in r else {"k": r["k"]} for r in expected
    ]


def test_drop_table_and_list_tables(lake: Lake, conn: merkle.Connection, connect: Connect) -> None:
    db = conn.create_db("shop")
    db = db.create_table("b", key="k").create_table("a", key="k").create_table("c", key="k")
    assert db.list_tables() == ["a", "b", "c"]
    db = db.write("b", [{"k": 1}]).commit()
    dropped = db.drop_table("b")
    assert dropped.list_tables() == ["a", "c"]
    assert db.list_tables() == ["a", "b", "c"]
    with pytest.raises(NotFoundError, match="'b'"):
        dropped.scan("b")
    dropped.commit()
    reopened = connect(lake).open_db("shop")
    assert reopened.list_tables() == ["a", "c"]
    # The old version still has it; a new table of the same name starts empty.
    assert full_scan(connect(lake).open_db("shop", version=1), "b") == [{"k": 1}]
    again = reopened.create_table("b", key="k").commit()
    assert full_scan(again, "b") == []


# -- records -------------------------------------------------------------------------


def _records(n: int) -> list[dict[str, object]]:
    return [{"k": i, "name": f"n{i}", "qty": i % 4} for i in range(n)]


@pytest.mark.parametrize("form", ["dicts", "generator", "mapping", "arrow_table", "record_batch"])
def test_write_accepts_every_form(
    lake: Lake, conn: merkle.Connection, connect: Connect, form: str
) -> None:
    records = _records(30)
    data: object
    if form == "dicts":
        data = list(reversed(records))
    elif form == "generator":
        data = (dict(r) for r in records)
    elif form == "mapping":
        data = {r["k"]: {"name": r["name"], "qty": r["qty"]} for r in records}
    elif form == "arrow_table":
        data = pa.Table.from_pylist(records)
    else:
        data = pa.RecordBatch.from_pylist(records)
    db = conn.create_db("shop").create_table("t", key="k", tablet_size_limit=8, patch_limit=4)
    db = db.write("t", data)
    assert full_scan(db, "t") == records
    db.commit()
    assert full_scan(connect(lake).open_db("shop"), "t") == records


def test_write_upserts_whole_records(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="k")
    db = db.write("t", [{"k": 1, "a": 1, "b": 2}, {"k": 2, "a": 2}]).commit()
    db = db.write("t", [{"k": 1, "a": 3}]).commit()
    assert db.get_records("t", [1, 2]) == {1: {"k": 1, "a": 3}, 2: {"k": 2, "a": 2}}
    # Within one write, the last record of a key wins.
    db = db.write("t", [{"k": 5, "v": "first"}, {"k": 5, "v": "last"}]).commit()
    assert db.get_records("t", [5]) == {5: {"k": 5, "v": "last"}}


def test_delete_is_blind(lake: Lake, conn: merkle.Connection, connect: Connect) -> None:
    db = conn.create_db("shop").create_table("t", key="k", tablet_size_limit=5, patch_limit=3)
    db = db.write("t", _records(20)).commit()
    db = db.delete("t", [3, 3, 7, 1000, -5]).commit()
    expected = [r for r in _records(20) if r["k"] not in (3, 7)]
    assert full_scan(connect(lake).open_db("shop"), "t") == expected
    # A delete of a key, then a write of it again, in one transaction.
    db = db.delete("t", [4]).write("t", [{"k": 4, "back": True}]).delete("t", [5]).commit()
    got = connect(lake).open_db("shop").get_records("t", [4, 5])
    assert got == {4: {"k": 4, "back": True}}
    # Deleting from an empty table is fine too.
    empty = db.create_table("e", key="k").delete("e", [1, 2])
    assert full_scan(empty.commit(), "e") == []


def test_get_records(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="k", tablet_size_limit=5, patch_limit=3)
    db = db.write("t", _records(40)).commit().write("t", [{"k": 41, "name": "pending"}])
    got = db.get_records("t", [39, 0, 41, 17, 17, 1000])
    assert got == {
        0: {"k": 0, "name": "n0", "qty": 0},
        17: {"k": 17, "name": "n17", "qty": 1},
        39: {"k": 39, "name": "n39", "qty": 3},
        41: {"k": 41, "name": "pending"},
    }
    assert db.get_records("t", [1, 41], fields=["qty"]) == {1: {"k": 1, "qty": 1}, 41: {"k": 41}}
    assert db.get_records("t", []) == {}
    assert db.get_records("t", [5000]) == {}


def test_to_arrow(conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="k", tablet_size_limit=7, patch_limit=5)
    records = _records(60)
    db = db.write("t", records).commit().write("t", [{"k": 60, "name": "new", "qty": 9}])
    records.append({"k": 60, "name": "new", "qty": 9})
    table = db.to_arrow("t")
    assert isinstance(table, pa.Table)
    assert table.column_names[0] == "k"
    assert same_columns(table, pa.Table.from_pylist(records))
    assert table.to_pylist() == [{c: r[c] for c in table.column_names} for r in records]
    part = db.to_arrow("t", fields=["qty"], from_pk=10, to_pk=19)
    assert part.to_pylist() == [{"k": r["k"], "qty": r["qty"]} for r in records[10:20]]
    assert db.to_arrow("t", from_pk=1000).num_rows == 0


# -- tablets -------------------------------------------------------------------------


def _tabled(conn: merkle.Connection, n: int = 100) -> merkle.Database:
    """A committed table whose records are all in tablets (a write above the patch limit)."""
    db = conn.create_db("shop").create_table(
        "t", key="k", tablet_size_limit=10, branching_factor=3, patch_limit=20
    )
    return db.write("t", _records(n)).commit()


def test_list_tablets(conn: merkle.Connection) -> None:
    db = _tabled(conn)
    tablets = db.list_tablets("t")
    assert len(tablets) >= 10
    assert all(set(t) == {"id", "count", "size", "start", "end"} for t in tablets)
    assert sum(t["count"] for t in tablets) == 100
    assert all(0 < t["count"] <= 10 and t["size"] > 0 for t in tablets)
    assert len({t["id"] for t in tablets}) == len(tablets)
    bounds = [(t["start"], t["end"]) for t in tablets]
    assert bounds[0][0] == 0
    assert bounds[-1][1] == 99
    for (_, end), (start, _) in itertools.pairwise(bounds):
        assert end < start
    assert conn.create_db("empty").create_table("e", key="k").list_tablets("e") == []


def test_read_tablet(lake: Lake, conn: merkle.Connection, connect: Connect) -> None:
    db = _tabled(conn)
    reopened = connect(lake).open_db("shop")
    pieces = []
    for tablet in reopened.list_tablets("t"):
        records = list(reopened.read_tablet(tablet["id"]))
        assert len(records) == tablet["count"]
        assert (records[0]["k"], records[-1]["k"]) == (tablet["start"], tablet["end"])
        assert list(reopened.read_tablet(tablet["id"], fields=["qty"])) == [
            {"k": r["k"], "qty": r["qty"]} for r in records
        ]
        pieces.extend(records)
    assert pieces == full_scan(db, "t") == _records(100)


def test_build_table_from_tablets(lake: Lake, conn: merkle.Connection, connect: Connect) -> None:
    db = _tabled(conn)
    tablets = db.list_tablets("t")
    ids = [t["id"] for t in tablets]
    # build_table needs the key codec up front (it is not inferred from the tablets).
    db = db.create_table("copy", key="k", key_codec="int", tablet_size_limit=10, branching_factor=3)
    db = db.create_table("part", key="k", key_codec="int", tablet_size_limit=10, branching_factor=3)
    built = db.build_table("copy", ids).build_table("part", ids[2:5])
    assert full_scan(built, "copy") == full_scan(built, "t")
    expected_part = [r for i in ids[2:5] for r in built.read_tablet(i)]
    assert full_scan(built, "part") == expected_part
    assert full_scan(db, "copy") == []
    built.commit()
    reopened = connect(lake).open_db("shop")
    assert full_scan(reopened, "copy") == _records(100)
    assert reopened.describe_table("copy")["count"] == 100
    assert [t["id"] for t in reopened.list_tablets("copy")] == ids
    assert full_scan(reopened, "part") == expected_part
    # The rebuilt table takes writes like any other.
    after = reopened.write("copy", [{"k": 5, "name": "changed"}]).commit()
    assert after.get_records("copy", [5]) == {5: {"k": 5, "name": "changed"}}
    assert after.get_records("t", [5]) == {5: {"k": 5, "name": "n5", "qty": 1}}


def test_build_table_refuses_tablets_out_of_order(conn: merkle.Connection) -> None:
    db = _tabled(conn).create_table("copy", key="k", key_codec="int")
    ids = [t["id"] for t in db.list_tablets("t")]
    with pytest.raises(UsageError, match="order"):
        db.build_table("copy", [ids[1], ids[0]])


def test_small_limits_split_tablets_and_flush_pending(
    lake: Lake, conn: merkle.Connection, connect: Connect
) -> None:
    db = conn.create_db("shop").create_table(
        "t", key="k", tablet_size_limit=6, branching_factor=3, patch_limit=8
    )
    model: dict[int, dict[str, int]] = {}
    seen_pending = seen_flush = False
    for round_ in range(12):
        batch = [{"k": (round_ * 7 + j * 13) % 90, "r": round_} for j in range(5)]
        db = db.write("t", batch).delete("t", [round_ * 3])
        for r in batch:
            model[r["k"]] = r
        model.pop(round_ * 3, None)
        db = db.commit()
        patch = db.describe_table("t")["patch"]["count"]
        seen_pending |= patch > 0
        seen_flush |= patch == 0 and db.describe_table("t")["tablets"] > 0
        assert full_scan(db, "t") == [model[k] for k in sorted(model)]
    assert seen_pending
    assert seen_flush
    described = connect(lake).open_db("shop").describe_table("t")
    assert described["tablets"] > 3  # split, and more tablets than one index node holds
    assert described["count"] == len(model)
    assert all_tables(connect(lake).open_db("shop")) == {"t": [model[k] for k in sorted(model)]}
