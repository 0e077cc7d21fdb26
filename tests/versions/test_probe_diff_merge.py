"""Diff and merge see schema changes, floats inside lists and structs, composite keys.

Found by an adversarial probe:

* a merge took the other side's whole table when one side had only altered
  its schema (``_changed`` compared settings and records, never the schema),
  so a committed ``alter_schema`` was lost, and two different widenings of
  one field merged without the documented table conflict;
* a float inside a list or struct was compared as a Python value: a change
  0.0 -> -0.0 was no change (and a merge lost it), an unchanged NaN was a
  change (and a merge raised a conflict nobody made);
* diff did not list a schema change among a table's altered settings;
* diff records of a composite-key table showed the internal struct column
  ``"(g,n)"`` instead of the key fields ``scan`` shows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

import merkle
from merkle.errors import MergeConflictError

SCHEMA = pa.schema([("k", pa.int64()), ("i", pa.int32()), ("s", pa.string())])


@pytest.fixture
def conn(lake: Any) -> Iterator[merkle.Connection]:
    with merkle.connect(lake.uri, create=True, **lake.options) as c:
        yield c


def _fork(conn: merkle.Connection) -> merkle.Database:
    """``main`` with table ``t`` (two rows), and ``dev`` cloned from it."""
    rows = pa.table({"k": [1, 2], "i": [1, 2], "s": ["a", "b"]}, schema=SCHEMA)
    main = conn.create_db("main").create_table("t", key="k", schema=SCHEMA)
    main = main.write("t", rows).commit()
    conn.create_db("dev", root=main)
    return main


def _sign(value: float) -> float:
    return math.copysign(1.0, value)


# -- 1. a schema change on one side survives the merge ------------------------------------


@pytest.mark.parametrize("altered", ["main", "dev"])
def test_merge_keeps_a_schema_change_when_the_other_side_only_wrote_rows(
    conn: merkle.Connection, altered: str
) -> None:
    _fork(conn)
    writer = "dev" if altered == "main" else "main"
    conn.open_db(altered).alter_schema(
        "t", widen={"i": pa.int64()}, add={"n": pa.float64()}
    ).commit()
    conn.open_db(writer).write("t", [{"k": 3, "i": 3, "s": "c"}]).commit()
    head = conn.merge("dev", "main")
    schema = head.describe_table("t")["schema"]
    assert schema.field("i").type == pa.int64()
    assert schema.field("n").type == pa.float64()
    assert [r["k"] for r in head.scan("t")] == [1, 2, 3]
    # A write the altered side accepted before the merge is accepted after it.
    head = head.write("t", [{"k": 9, "i": 2**40, "n": 0.5}]).commit()
    assert head.get_records("t", [9])[9] == {"k": 9, "i": 2**40, "n": 0.5}


@pytest.mark.parametrize(
    "change",
    [{"widen": {"i": pa.int64()}}, {"add": {"n": pa.string()}}, {"free": ["s"]}],
    ids=["widen", "add", "free"],
)
def test_merge_takes_their_schema_change_when_ours_did_nothing(
    conn: merkle.Connection, change: dict[str, Any]
) -> None:
    _fork(conn)
    dev = conn.open_db("dev").alter_schema("t", **change).commit()
    head = conn.merge("dev", "main")
    assert head.describe_table("t")["schema"] == dev.describe_table("t")["schema"]
    assert list(head.scan("t")) == list(dev.scan("t"))


def test_two_different_widenings_of_one_field_are_a_table_conflict(
    conn: merkle.Connection,
) -> None:
    _fork(conn)
    conn.open_db("main").alter_schema("t", widen={"i": pa.int64()}).commit()
    conn.open_db("dev").alter_schema("t", widen={"i": pa.float64()}).commit()
    with pytest.raises(MergeConflictError) as caught:
        conn.merge("dev", "main")
    assert "t" in caught.value.table_conflicts
    assert "'i'" in caught.value.table_conflicts["t"]
    assert conn.open_db("main").describe_table("t")["schema"].field("i").type == pa.int64()
    head = conn.merge("dev", "main", resolve="theirs")
    assert head.describe_table("t")["schema"].field("i").type == pa.float64()


# -- 4. diff shows a schema change ---------------------------------------------------------


def test_diff_lists_a_schema_change_among_the_altered_settings(conn: merkle.Connection) -> None:
    old = _fork(conn)
    new = old.alter_schema("t", widen={"i": pa.int64()}, add={"n": pa.string()}).commit()
    changes = new.diff(old)
    assert changes["t"].altered == ["schema"]
    assert changes.summary()["tables_altered"] == {"t": ["schema"]}
    assert changes["t"].counts().total == 0
    assert "t" not in new.diff(new.version).tables


# -- 2, 3. floats inside lists and structs compare as bits, NaN equal to NaN ---------------

NESTED = pa.schema(
    [
        ("k", pa.int64()),
        ("l", pa.list_(pa.float64())),
        ("s", pa.struct([("a", pa.float32())])),
    ]
)


def _nested(db: merkle.Database, rows: dict[str, list[Any]]) -> merkle.Database:
    return db.write("t", pa.table(rows, schema=NESTED)).commit()


def test_diff_sees_a_change_of_sign_inside_a_list_and_a_struct(conn: merkle.Connection) -> None:
    db = conn.create_db("d").create_table("t", key="k", schema=NESTED)
    struct_before = [{"a": 1.0}, {"a": 0.0}, {"a": 1.0}]
    old = _nested(db, {"k": [1, 2, 3], "l": [[0.0], [1.0], [2.0]], "s": struct_before})
    new = _nested(old, {"k": [1, 2], "l": [[-0.0], [1.0]], "s": [{"a": 1.0}, {"a": -0.0}]})
    records = new.diff(old)["t"].records()
    assert [(r["key"], r["change"]) for r in records] == [(1, "update"), (2, "update")]
    assert _sign(records[0]["new"]["l"][0]) == -1.0
    assert _sign(records[1]["new"]["s"]["a"]) == -1.0
    assert new.diff(old)["t"].counts().updated == 2


def test_diff_sees_a_change_of_sign_inside_a_schema_free_field(conn: merkle.Connection) -> None:
    old = conn.create_db("d").create_table("t", key="k", schema_free=True)
    old = old.write("t", [{"k": 1, "v": [0.0]}, {"k": 2, "v": {"a": 0.0}}]).commit()
    new = old.write("t", [{"k": 1, "v": [-0.0]}, {"k": 2, "v": {"a": -0.0}}]).commit()
    assert [r["key"] for r in new.diff(old)["t"].records()] == [1, 2]


def test_merge_keeps_a_change_of_sign_inside_a_list(conn: merkle.Connection) -> None:
    main = conn.create_db("main").create_table("t", key="k", schema=NESTED)
    _nested(main, {"k": [1, 2], "l": [[0.0], [1.0]], "s": [None, None]})
    conn.create_db("dev", root=conn.open_db("main"))
    _nested(conn.open_db("main"), {"k": [1], "l": [[-0.0]], "s": [None]})
    _nested(conn.open_db("dev"), {"k": [3], "l": [[5.0]], "s": [None]})
    head = conn.merge("dev", "main")
    got = head.get_records("t", [1, 3])
    assert _sign(got[1]["l"][0]) == -1.0
    assert got[3]["l"] == [5.0]


def test_an_unchanged_nested_nan_is_no_change_and_no_conflict(conn: merkle.Connection) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64()), ("l", pa.list_(pa.float64()))])
    nan = float("nan")
    base = conn.create_db("main").create_table(
        "t", key="k", schema=schema, patch_limit=1, patch_share=1
    )
    base = base.write("t", pa.table({"k": [1, 2], "v": [1, 1], "l": [[nan], [1.0]]})).commit()
    # Compaction rewrites the tablet holding key 1, so the diff compares its rows.
    new = base.write("t", pa.table({"k": [2], "v": [2], "l": [[1.0]]})).compact().commit()
    assert [(r["key"], r["change"]) for r in new.diff(base)["t"].records()] == [(2, "update")]
    conn.create_db("dev", root=base)
    conn.open_db("dev").update("t", {1: {"v": 5}}).commit()
    head = conn.merge("dev", "main")
    got = head.get_records("t", [1, 2])
    assert got[1]["v"] == 5
    assert math.isnan(got[1]["l"][0])
    assert got[2]["v"] == 2


# -- 5. composite keys show as their fields ------------------------------------------------


def test_diff_records_of_a_composite_key_show_the_key_fields(conn: merkle.Connection) -> None:
    db = conn.create_db("d").create_table("t", key=["g", "n"])
    old = db.write("t", [{"g": "a", "n": 1, "v": 1}, {"g": "b", "n": 2, "v": 1}]).commit()
    new = old.write("t", [{"g": "a", "n": 1, "v": 2}, {"g": "c", "n": 3, "v": 3}])
    new = new.delete("t", [("b", 2)]).commit()
    records = new.diff(old)["t"].records()
    assert records == [
        {
            "key": ("a", 1),
            "change": "update",
            "old": {"g": "a", "n": 1, "v": 1},
            "new": {"g": "a", "n": 1, "v": 2},
        },
        {"key": ("b", 2), "change": "delete", "old": {"g": "b", "n": 2, "v": 1}, "new": None},
        {"key": ("c", 3), "change": "insert", "old": None, "new": {"g": "c", "n": 3, "v": 3}},
    ]
    assert records[0]["new"] == next(new.scan("t"))


def test_cli_diff_of_a_composite_key_shows_the_key_fields(tmp_path: Path) -> None:
    from merkle.cli.main import cli

    uri = (tmp_path / "lake").as_uri()
    with merkle.connect(uri, create=True) as conn:
        db = conn.create_db("d").create_table("t", key=["g", "n"])
        db = db.write("t", [{"g": "a", "n": 1, "v": 1}]).commit()
        db.write("t", [{"g": "a", "n": 1, "v": 2}]).commit()
    result = CliRunner().invoke(
        cli, ["--lake", uri, "diff", "d", "-f", "jsonl"], env={"MERKLE_LAKE": None}
    )
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout.splitlines()[0])
    assert row["new"] == {"g": "a", "n": 1, "v": 2}
    assert row["old"] == {"g": "a", "n": 1, "v": 1}


def test_a_merge_from_an_earlier_life_of_the_database_is_merged(conn: merkle.Connection) -> None:
    """A version from before a drop and create again is not an ancestor of the head: the
    merge of it returned the head unchanged, committing nothing (its rows were lost)."""
    db = conn.create_db("s").create_table("t", key="k").commit()
    for i in range(4):
        db = db.write("t", [{"k": i}]).commit()  # versions 2..5: keys 0..3
    conn.drop_db("s")
    conn.create_db("s", root=conn.open_db("s", version=3))  # restored: keys 0, 1
    conn.open_db("s").write("t", [{"k": 100}]).commit()
    merged = conn.merge(conn.open_db("s", version=5), "s", base=3)
    assert sorted(r["k"] for r in merged.scan("t")) == [0, 1, 2, 3, 100]
    # An ancestor in the same life still merges as nothing to do.
    head = conn.open_db("s")
    assert conn.merge(conn.open_db("s", version=head.version - 1), "s").version == head.version


@pytest.mark.parametrize(
    "when",
    [
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:00-05:00",
    ],
)
def test_a_time_outside_the_years_python_holds_once_in_utc_is_a_usage_error(
    conn: merkle.Connection, when: str
) -> None:
    """open_db(at=...) raised a raw OverflowError (the CLI a traceback)."""
    import datetime

    from merkle.errors import UsageError

    conn.create_db("s").commit()
    with pytest.raises(UsageError, match="outside the years 1 to 9999"):
        conn.open_db("s", at=datetime.datetime.fromisoformat(when))


def test_history_with_limit_zero_is_a_usage_error(conn: merkle.Connection) -> None:
    """It said the database did not exist."""
    from merkle.errors import UsageError

    conn.create_db("s").commit()
    with pytest.raises(UsageError, match="limit must be at least 1"):
        conn.history("s", limit=0)
    assert len(conn.history("s", limit=1)) == 1
