"""A field dropped (or renamed away) and added again under its old name is a new field.

Before field identities (merkle/tablets/fieldids.py) a merge and a commit's
replay matched fields by name alone, so the other side's values of the old
field landed in the new one without a word: the last session's schema probe
(findings 1 and 2). Each case below fails that way on code without
identities; the rest guard what identities must not change: a rename and
back, a field added on both sides, fields a merge brings keeping theirs'
identity, and root bytes of tables that never freed a name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.blocks.codec import decode_node, encode_node
from merkle.errors import ConflictError, IntegrityError, MergeConflictError
from merkle.tablets.nodes import TableRoot

SCHEMA = pa.schema([("k", pa.int64()), ("f", pa.string()), ("g", pa.int64())])


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect("memory://") as c:
        yield c


def _main(conn: merkle.Connection) -> merkle.Database:
    rows = [{"k": i, "f": f"old-{i}", "g": i} for i in range(3)]
    return (
        conn.create_db("main").create_table("t", key="k", schema=SCHEMA).write("t", rows).commit()
    )


def _readd(db: merkle.Database, name: str = "f") -> merkle.Database:
    return db.alter_schema("t", drop=[name]).alter_schema("t", add={name: pa.string()})


def _rows(db: merkle.Database) -> list[dict[str, Any]]:
    return sorted(db.scan("t"), key=lambda r: r["k"])


# -- merges ---------------------------------------------------------------------------------


def test_a_merge_into_a_side_that_added_the_field_again_is_a_table_conflict(
    conn: merkle.Connection,
) -> None:
    # A record dev added (no row conflict: main never had key 10) with a value of the old
    # field: merged by name, it landed in main's new field.
    main = _main(conn)
    conn.create_db("dev", root=main).write("t", [{"k": 10, "f": "dev's", "g": 10}]).commit()
    _readd(main).write("t", [{"k": 5, "f": "new", "g": 5}]).commit()
    with pytest.raises(MergeConflictError, match="'f' was dropped and added again on our side"):
        conn.merge("dev", "main")
    assert [r["k"] for r in _rows(conn.open_db("main"))] == [0, 1, 2, 5]  # nothing committed


def test_a_merge_from_a_side_that_added_the_field_again_is_a_table_conflict(
    conn: merkle.Connection,
) -> None:
    main = _main(conn)
    _readd(conn.create_db("dev", root=main)).write("t", [{"k": 1, "f": "x", "g": 1}]).commit()
    main.write("t", [{"k": 12, "f": "main's", "g": 12}]).commit()  # no row conflict
    with pytest.raises(MergeConflictError, match="dropped and added again on their side"):
        conn.merge("dev", "main")


def test_the_conflict_is_found_from_a_fresh_connection(tmp_path: Any) -> None:
    with merkle.connect(tmp_path.as_uri()) as conn:
        main = _main(conn)
        conn.create_db("dev", root=main).write("t", [{"k": 10, "f": "dev's", "g": 10}]).commit()
        _readd(main).commit()
    with merkle.connect(tmp_path.as_uri()) as fresh, pytest.raises(MergeConflictError):
        fresh.merge("dev", "main")


def test_resolving_the_conflict_takes_one_side_whole(conn: merkle.Connection) -> None:
    main = _main(conn)
    conn.create_db("dev", root=main).update("t", {1: {"f": "dev's"}}).commit()
    _readd(main).commit()
    merged = conn.merge("dev", "main", resolve="ours")
    assert [r.get("f") for r in _rows(merged)] == [None, None, None]


def test_renamed_away_and_back_is_still_the_same_field(conn: merkle.Connection) -> None:
    main = _main(conn)
    conn.create_db("dev", root=main).update("t", {1: {"f": "dev's"}}).commit()
    main.alter_schema("t", rename={"f": "h"}).alter_schema("t", rename={"h": "f"}).commit()
    merged = conn.merge("dev", "main")
    assert _rows(merged)[1]["f"] == "dev's"


def test_a_field_added_on_both_sides_still_merges(conn: merkle.Connection) -> None:
    main = _main(conn)
    conn.create_db("dev", root=main).alter_schema("t", add={"z": pa.int64()}).write(
        "t", [{"k": 7, "f": "d", "g": 7, "z": 7}]
    ).commit()
    main.alter_schema("t", add={"z": pa.int64()}).write(
        "t", [{"k": 8, "f": "m", "g": 8, "z": 8}]
    ).commit()
    merged = conn.merge("dev", "main")
    assert {r["k"]: r.get("z") for r in _rows(merged)}[7] == 7


def test_a_field_a_merge_brings_keeps_its_identity_for_the_next_merge(
    conn: merkle.Connection,
) -> None:
    # dev freed a name (epoch 1), then added z: z is (z, 1) there. Brought into main (epoch
    # 0) by a merge, z must stay (z, 1): as (z, 0) the next merge from dev would take main's
    # z for a field dropped and added again.
    main = _main(conn)
    dev = conn.create_db("dev", root=main).alter_schema("t", drop=["g"]).commit()
    dev = dev.alter_schema("t", add={"z": pa.int64()}).write("t", [{"k": 1, "z": 1}]).commit()
    main = main.write("t", [{"k": 9, "f": "m", "g": 9}]).commit()
    with pytest.raises(MergeConflictError, match="'g' was dropped or renamed"):
        conn.merge("dev", "main")
    main = conn.merge("dev", "main", resolve="theirs")
    dev.update("t", {1: {"z": 2}}).commit()
    main.update("t", {0: {"f": "main's"}}).commit()
    merged = conn.merge("dev", "main")
    got = {r["k"]: r for r in _rows(merged)}
    assert got[1]["z"] == 2
    assert got[0]["f"] == "main's"


def test_a_field_taken_from_theirs_by_a_merge_keeps_their_identity(
    conn: merkle.Connection,
) -> None:
    main = _main(conn)
    dev = conn.create_db("dev", root=main)
    dev = _readd(dev, "g").alter_schema("t", drop=["g"]).commit()  # epoch 2
    dev = dev.alter_schema("t", add={"z": pa.int64()}).write("t", [{"k": 1, "z": 1}]).commit()
    main.write("t", [{"k": 9, "f": "m", "g": 9}]).commit()
    conn.merge("dev", "main", resolve="theirs")  # g: a table conflict, theirs taken
    # Now the same kind of merge where only rows and a new field come over.
    main2 = conn.create_db("main2", root=conn.open_db("dev", version=dev.version - 1))
    main2.write("t", [{"k": 20, "f": "m2"}]).commit()
    merged = conn.merge("dev", "main2")
    table = merged._table("t")
    assert table.root.field_ids.get("z") == dev._table("t").root.field_ids.get("z")
    assert table.root.schema_epoch >= 2


# -- replays --------------------------------------------------------------------------------


def test_a_replayed_update_of_a_field_added_again_meanwhile_conflicts(
    conn: merkle.Connection,
) -> None:
    _main(conn)
    stale = conn.open_db("main").update("t", {1: {"f": "stale"}})
    _readd(conn.open_db("main")).commit()
    with pytest.raises(ConflictError, match="'f' of table 't' was dropped and added again"):
        stale.commit()
    assert _rows(conn.open_db("main"))[1].get("f") is None


def test_a_replayed_write_of_a_field_added_again_meanwhile_conflicts(
    conn: merkle.Connection,
) -> None:
    _main(conn)
    stale = conn.open_db("main").write("t", [{"k": 4, "f": "stale", "g": 4}])
    _readd(conn.open_db("main")).commit()
    with pytest.raises(ConflictError, match="put the old field's values into the new one"):
        stale.commit()


def test_a_replayed_upsert_of_a_field_added_again_meanwhile_conflicts(
    conn: merkle.Connection,
) -> None:
    _main(conn)
    stale = conn.open_db("main").upsert("t", [{"k": 1, "f": "stale"}])
    _readd(conn.open_db("main")).commit()
    with pytest.raises(ConflictError, match="dropped and added again"):
        stale.commit()


def test_a_replayed_alter_of_a_field_added_again_meanwhile_conflicts(
    conn: merkle.Connection,
) -> None:
    _main(conn)
    stale = conn.open_db("main").alter_schema("t", rename={"f": "old_f"})
    _readd(conn.open_db("main")).commit()
    with pytest.raises(ConflictError, match="alter_schema of the old field"):
        stale.commit()
    assert "f" in conn.open_db("main").describe_table("t")["schema"].names


def test_a_replay_not_touching_the_field_added_again_commits(conn: merkle.Connection) -> None:
    _main(conn)
    stale = conn.open_db("main").update("t", {1: {"g": 10}})
    _readd(conn.open_db("main")).commit()
    done = stale.commit()
    assert _rows(done)[1] == {"k": 1, "g": 10}


# -- the stored identities ------------------------------------------------------------------


def test_a_table_that_never_freed_a_name_stores_no_identities(conn: merkle.Connection) -> None:
    db = _main(conn).alter_schema("t", add={"z": pa.int64()}, widen={"f": pa.large_string()})
    node = db._table("t").root.to_node()
    assert "field_ids" not in node
    assert "schema_epoch" not in node


def test_identities_survive_storage_and_a_rename(conn: merkle.Connection) -> None:
    db = _readd(_main(conn)).alter_schema("t", rename={"g": "h"}).commit()
    root = conn.open_db("main")._table("t").root
    assert root.schema_epoch == 2
    assert dict(root.field_ids) == {"f": ("f", 1), "h": ("g", 0)}
    assert TableRoot.from_node(decode_node(encode_node(root.to_node()))) == root
    assert db._table("t").root == root


@pytest.mark.parametrize(
    "bad", [{"f": "f"}, {"f": ["f"]}, {"f": ["f", -1]}, {"f": [1, 0]}, ["f"], {"f": ["f", True]}]
)
def test_malformed_identities_are_an_integrity_error(conn: merkle.Connection, bad: Any) -> None:
    node = _readd(_main(conn))._table("t").root.to_node()
    node["field_ids"] = bad
    with pytest.raises(IntegrityError, match="malformed"):
        TableRoot.from_node(node)
