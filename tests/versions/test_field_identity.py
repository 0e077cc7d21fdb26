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
import pyarrow.compute as pc
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
    "bad",
    [
        {"f": "f"},
        {"f": ["f"]},
        {"f": ["f", -1]},
        {"f": [1, 0]},
        ["f"],
        {"f": ["f", True]},
        {"f": ["", 1]},  # no birth name
        {"f": ["f", 2]},  # born after the table's epoch (1)
        {"nope": ["f", 1]},  # no such field
        {"k": ["k", 1]},  # a key field is never dropped
        {"f": ["g", 0]},  # g's identity: two fields, one identity
        {"f": ["f", 1], "g": ["g", 0]},  # the default is left out
        {},  # left out when empty
    ],
)
def test_malformed_identities_are_an_integrity_error(conn: merkle.Connection, bad: Any) -> None:
    node = _readd(_main(conn))._table("t").root.to_node()
    node["field_ids"] = bad
    with pytest.raises(IntegrityError, match="malformed"):
        TableRoot.from_node(node)


# -- a probe of the identities (same session): spurious and missed conflicts ---------------


def test_a_replay_of_a_field_the_transaction_added_does_not_conflict(
    conn: merkle.Connection,
) -> None:
    # The transaction's own new field is born again on the replay, in the head's (higher)
    # epoch: that is no field dropped and added again by someone else.
    _main(conn)
    stale = conn.open_db("main").alter_schema("t", add={"z": pa.int64()})
    stale = stale.write("t", [{"k": 1, "f": "v", "z": 5}]).update("t", {1: {"z": 6}})
    conn.open_db("main").alter_schema("t", drop=["g"]).commit()  # an unrelated name freed
    done = stale.commit()
    assert _rows(done)[1] == {"k": 1, "f": "v", "z": 6}


def test_a_replay_after_a_rename_away_and_back_elsewhere_does_not_conflict(
    conn: merkle.Connection,
) -> None:
    _main(conn)
    stale = conn.open_db("main").alter_schema("t", add={"z": pa.int64()})
    stale = stale.write("t", [{"k": 1, "f": "v", "g": 1, "z": 5}])
    other = conn.open_db("main").alter_schema("t", rename={"g": "h"})
    other.alter_schema("t", rename={"h": "g"}).commit()
    assert _rows(stale.commit())[1]["z"] == 5


def test_a_transaction_that_drops_and_adds_a_field_itself_replays(
    conn: merkle.Connection,
) -> None:
    _main(conn)
    stale = _readd(conn.open_db("main")).write("t", [{"k": 1, "f": "new"}])
    other = conn.open_db("main").alter_schema("t", add={"tmp": pa.int64()})
    other.alter_schema("t", drop=["tmp"]).commit()  # a name freed: the head's epoch is 1
    assert _rows(stale.commit())[1] == {"k": 1, "f": "new"}


def test_a_merge_taking_ours_keeps_theirs_larger_epoch(conn: merkle.Connection) -> None:
    # dev dropped and added f (epoch 1, f is (f, 1)); main stays at epoch 0 if the merge
    # keeps ours' table as it was, and main's own later drop and add of f is then born
    # (f, 1) too: dev's values of its f would land in main's new one unseen.
    main = _main(conn)
    _readd(conn.create_db("dev", root=main)).commit()
    main.update("t", {0: {"g": 9}}).commit()
    merged = conn.merge("dev", "main", resolve="ours")
    assert merged._table("t").root.schema_epoch == 1
    _readd(merged).commit()
    conn.open_db("dev").write("t", [{"k": 30, "f": "dev's"}]).commit()
    with pytest.raises(MergeConflictError, match="dropped and added again on our side"):
        conn.merge("dev", "main")


def test_a_clean_merge_keeps_theirs_larger_epoch(conn: merkle.Connection) -> None:
    main = _main(conn)
    dev = conn.create_db("dev", root=main).alter_schema("t", add={"tmp": pa.int64()})
    dev = dev.alter_schema("t", drop=["tmp"]).alter_schema("t", add={"z": pa.int64()})
    dev.write("t", [{"k": 10, "f": "d", "g": 10, "z": 10}]).commit()  # z is (z, 1)
    main.alter_schema("t", add={"z": pa.int64()}).write(
        "t", [{"k": 20, "f": "m", "g": 20, "z": 20}]
    ).commit()
    merged = conn.merge("dev", "main")
    assert merged._table("t").root.schema_epoch == 1
    merged.alter_schema("t", drop=["z"]).alter_schema("t", add={"z": pa.int64()}).commit()
    conn.open_db("dev").update("t", {1: {"z": 111}}).commit()
    with pytest.raises(MergeConflictError, match="'z' was dropped and added again on our side"):
        conn.merge("dev", "main")


@pytest.mark.parametrize("dev_first", ["typo renamed", "temporary field"])
def test_a_field_added_on_both_sides_merges_again_and_again(
    conn: merkle.Connection, dev_first: str
) -> None:
    main = _main(conn)
    dev = conn.create_db("dev", root=main)
    if dev_first == "typo renamed":  # dev's email is ("emial", 0)
        dev = dev.alter_schema("t", add={"emial": pa.string()})
        dev = dev.alter_schema("t", rename={"emial": "email"})
    else:  # dev's email is ("email", 1)
        dev = dev.alter_schema("t", add={"tmp": pa.string()}).alter_schema("t", drop=["tmp"])
        dev = dev.alter_schema("t", add={"email": pa.string()})
    dev.write("t", [{"k": 10, "f": "d", "g": 10, "email": "d@x"}]).commit()
    main.alter_schema("t", add={"email": pa.string()}).write(
        "t", [{"k": 20, "f": "m", "g": 20, "email": "m@x"}]
    ).commit()
    conn.merge("dev", "main")
    for i in range(2):
        conn.open_db("dev").update("t", {10: {"email": f"d{i}@x"}}).commit()
        conn.open_db("main").update("t", {0: {"f": f"main {i}"}}).commit()
        merged = conn.merge("dev", "main")
        assert {r["k"]: r.get("email") for r in _rows(merged)}[10] == f"d{i}@x"


def test_dropping_and_adding_a_field_that_held_no_value_is_still_seen(
    conn: merkle.Connection,
) -> None:
    # Same schema bytes and no record changed: the merge took main as unchanged and
    # theirs whole, dev's value of the old field landing in main's new one.
    schema = pa.schema([("k", pa.int64()), ("f", pa.string())])
    main = conn.create_db("main").create_table("t", key="k", schema=schema)
    main = main.write("t", [{"k": 1}]).commit()
    conn.create_db("dev", root=main).update("t", {1: {"f": "dev's"}}).commit()
    _readd(main).commit()
    with pytest.raises(MergeConflictError, match="dropped and added again on our side"):
        conn.merge("dev", "main")


def test_renames_in_one_call_keep_identities_and_values(conn: merkle.Connection) -> None:
    db = _main(conn).alter_schema("t", rename={"f": "x", "g": "f"})
    assert dict(db._table("t").root.field_ids) == {"x": ("f", 0), "f": ("g", 0)}
    db = conn.open_db("main").alter_schema("t", rename={"f": "tmp", "g": "f", "tmp": "g"})
    # Before: the chain was keyed by the names in between, and one column was lost.
    assert _rows(db)[1] == {"k": 1, "f": 1, "g": "old-1"}
    assert dict(db._table("t").root.field_ids) == {"f": ("g", 0), "g": ("f", 0)}


def test_a_replay_over_a_field_renamed_onto_the_name_says_so(conn: merkle.Connection) -> None:
    _main(conn)
    stale = conn.open_db("main").update("t", {1: {"f": "stale"}})
    conn.open_db("main").alter_schema("t", rename={"f": "old_f", "g": "f"}).commit()
    with pytest.raises(ConflictError, match="field 'g' renamed to its name"):
        stale.commit()


def test_a_replayed_delete_where_after_a_field_was_added_again_conflicts(
    conn: merkle.Connection,
) -> None:
    # Which fields a predicate reads is not recorded: on the new f it matched k=0 (whose
    # new f is "old-1") and kept k=1, the record it was written for.
    _main(conn)
    stale = conn.open_db("main").delete_where("t", pc.field("f") == "old-1")
    _readd(conn.open_db("main")).update("t", {0: {"f": "old-1"}}).commit()
    with pytest.raises(ConflictError, match="may read it in its predicate"):
        stale.commit()
    assert [r["k"] for r in _rows(conn.open_db("main"))] == [0, 1, 2]


def test_a_replayed_upsert_condition_after_a_field_was_added_again_conflicts(
    conn: merkle.Connection,
) -> None:
    _main(conn)
    stale = conn.open_db("main").upsert(
        "t", [{"k": 1, "g": 10}], condition=lambda old, new: old.get("f") == "old-1"
    )
    _readd(conn.open_db("main")).commit()
    with pytest.raises(ConflictError, match="may read it in its condition"):
        stale.commit()


def test_a_replayed_delete_where_after_an_unrelated_change_commits(
    conn: merkle.Connection,
) -> None:
    _main(conn)
    stale = conn.open_db("main").delete_where("t", pc.field("f") == "old-1")
    conn.open_db("main").alter_schema("t", add={"z": pa.int64()}).commit()
    assert [r["k"] for r in _rows(stale.commit())] == [0, 2]


def test_a_field_renamed_to_a_name_the_base_field_left_is_a_table_conflict(
    conn: merkle.Connection,
) -> None:
    # main dropped f and renamed g to f; dev added a record with a value of the old f.
    # By name, dev's value of the old f landed in main's f, which is g's.
    main = _main(conn)
    conn.create_db("dev", root=main).write("t", [{"k": 10, "f": "dev's old f"}]).commit()
    main.alter_schema("t", drop=["f"]).alter_schema("t", rename={"g": "f"}).commit()
    with pytest.raises(MergeConflictError, match="'g' was renamed to 'f'"):
        conn.merge("dev", "main")
