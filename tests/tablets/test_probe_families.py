"""Field families: tablets of another family layout given to ``build_table``, families
kept by ``alter_schema``, and bad family arguments (defects found by probing)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import merkle
from merkle.blocks import BlockStore
from merkle.db.database import Database
from merkle.errors import IntegrityError, SchemaError, UsageError
from merkle.storage.memory import MemoryStore
from merkle.tablets import Limits, Table, TableStore, validate

ROWS = [{"k": i, "a": i, "b": str(i), "c": i * 1.5} for i in range(120)]


def _db(families: dict[str, Any]) -> Database:
    conn = merkle.connect("memory://")
    db = conn.create_db("d")
    db = db.create_table("t", key="k", families=families, tablet_size_limit=40).commit()
    return db.write("t", ROWS).compact("t").commit()


def _validate(db: Database) -> None:
    table = db._table("t")
    validate(table.ts, table)


@pytest.mark.parametrize(
    "families",
    [
        {"x": {"a"}},  # b now in the base
        {"x": {"a"}, "y": {"b"}},  # b now in another family
        {"y": {"a", "b"}},  # the tablets' family is not the table's
        {},
    ],
    ids=["to-base", "to-other-family", "family-renamed", "no-families"],
)
def test_build_table_reads_fields_of_tablets_written_under_other_families(
    families: dict[str, Any],
) -> None:
    """Restoring an earlier version's tablets after ``alter_families``: a projection
    read base plus the table's families only, so ``b`` (in the tablets' family ``x``)
    read as null; the tablets are now rewritten into the table's families."""
    db = _db({"x": {"a", "b"}})
    old_ids = [t["id"] for t in db.list_tablets("t")]
    mid = db.alter_families("t", families).commit()
    db = mid.build_table("t", old_ids).commit()
    assert db.to_arrow("t", fields=["b"]).to_pylist() == [{"k": r["k"], "b": r["b"]} for r in ROWS]
    assert db.to_arrow("t").to_pylist() == ROWS
    assert db.get_records("t", [5], fields=["b"]) == {5: {"k": 5, "b": "5"}}
    assert list(db.scan("t", fields=["b"], limit=2)) == [{"k": 0, "b": "0"}, {"k": 1, "b": "1"}]
    first = db.list_tablets("t")[0]["id"]
    assert all("b" in rec for rec in db.read_tablet(first, fields=["b"]))
    assert "t" not in db.diff(mid, fields=["b"]).tables  # the same records as before
    _validate(db)
    # Tablets already in the table's families are linked as they are.
    ids = [t["id"] for t in db.list_tablets("t")]
    assert [t["id"] for t in db.build_table("t", ids).list_tablets("t")] == ids


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize(
    ("written", "table"),
    [
        ({"x": ["a", "b"]}, {"x": ["a"]}),  # a family field the table keeps in the base
        ({}, {"x": ["b"]}),  # a base field the table keeps in a family
    ],
    ids=["family-to-base", "base-to-family"],
)
def test_build_from_writes_tablets_into_the_tables_families(
    typed: bool, written: dict[str, list[str]], table: dict[str, list[str]]
) -> None:
    """Schema-free (pre-schema) tables too: their block schemas are read, not their data.
    A base field the table puts in a family read correctly, but failed ``validate``."""
    ts = TableStore(BlockStore(MemoryStore()))
    limits = Limits(tablet_size=16, branching=4, patch=4)
    source = Table.new(ts, key_field="k", families=written, limits=limits, typed=typed)
    source = source.write(ROWS, version=1).flush()
    ids = [ref.cid for ref in source.tablets()]
    target = Table.new(ts, key_field="k", families=table, limits=limits, typed=typed)
    target = target.write(ROWS[:1], version=1).flush()
    built = target.build_from(ids)
    assert built.to_arrow(fields=["b"]).to_pylist() == [{"k": r["k"], "b": r["b"]} for r in ROWS]
    assert built.to_arrow().to_pylist() == ROWS
    validate(ts, built)
    assert not {ref.cid for ref in built.tablets()} & set(ids)


def test_validate_reports_blocks_of_other_families_and_says_how_to_repair() -> None:
    """A table an older ``build_table`` left with blocks of other families reads ``b`` as
    missing in projections: ``validate`` names the field and the repair, which works."""
    ts = TableStore(BlockStore(MemoryStore()))
    limits = Limits(tablet_size=16, branching=4, patch=4)
    table = Table.new(ts, key_field="k", families={"x": ["a", "b"]}, limits=limits, typed=True)
    table = table.write(ROWS, version=1).flush()
    old = Table(ts, replace(table.root, families={"x": ("a",)}))  # as an older build left it
    with pytest.raises(IntegrityError, match=r"field 'b' in the block of family 'x'.*alter_fam"):
        validate(ts, old)
    repaired = old.with_families({"x": ["a"]})
    validate(ts, repaired)
    assert repaired.to_arrow(fields=["b"]).column("b").to_pylist() == [r["b"] for r in ROWS]


def test_rename_onto_a_name_another_family_lists_is_refused() -> None:
    """The field would be in two families (format.md: at most one)."""
    conn = merkle.connect("memory://")
    db = conn.create_db("d")
    db = db.create_table("t", key="k", families={"A": {"a"}, "B": {"z"}}).commit()
    db = db.write("t", [{"k": i, "a": i} for i in range(10)]).commit()
    with pytest.raises(SchemaError, match=r"family 'B' already lists 'z'.*alter_families"):
        db.alter_schema("t", rename={"a": "z"})
    assert db.describe_table("t")["families"] == {"A": ["a"], "B": ["z"]}


def test_rename_keeps_each_field_in_one_family() -> None:
    """A rename onto a name its own family lists was a member listed twice; the other
    cases (a base field into the family reserving its new name, a chain) are kept."""
    cases: list[tuple[dict[str, Any], dict[str, str], dict[str, list[str]]]] = [
        ({"F": {"a", "z"}}, {"a": "z"}, {"F": ["z"]}),  # a name of its own family: one member
        ({"B": {"z"}}, {"a": "z"}, {"B": ["z"]}),  # a base field into the family reserving it
        ({"A": {"a"}, "B": {"x"}}, {"x": "y", "a": "x"}, {"A": ["x"], "B": ["y"]}),  # a chain
    ]
    for families, rename, expected in cases:
        conn = merkle.connect("memory://")
        db = conn.create_db("d")
        db = db.create_table("t", key="k", families=families).commit()
        db = db.write("t", [{"k": i, "a": i, "x": -i} for i in range(10)]).commit()
        db = db.alter_schema("t", rename=rename).commit()
        got = db.describe_table("t")["families"]
        assert got == expected
        assert db.alter_families("t", got).describe_table("t")["families"] == expected
        read = db.to_arrow("t", fields=list(rename.values()))
        assert all(read.column(name).null_count == 0 for name in rename.values())
        _validate(db)


@pytest.mark.parametrize("fields", [["a", 1], ["a", None], [["a"]]])
@pytest.mark.parametrize("call", ["create_table", "alter_families"])
def test_a_family_holding_a_name_that_is_not_a_string_is_a_usage_error(
    fields: list[Any], call: str
) -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d")
    db = db.create_table("t", key="k").write("t", [{"k": 1, "a": 1}]).commit()
    calls = {
        "create_table": lambda: db.create_table("n", key="k", families={"x": fields}),
        "alter_families": lambda: db.alter_families("t", {"x": fields}),
    }
    with pytest.raises(UsageError, match="family 'x' holds an invalid field name"):
        calls[call]()


@pytest.mark.parametrize(
    "change",
    [{"rename": {"c": "c2"}}, {"drop": ["c"]}, {"free": ["c"]}],
    ids=["rename", "drop", "free"],
)
def test_alter_schema_keeps_the_families_it_does_not_change(change: dict[str, Any]) -> None:
    """An empty family was dropped by any rewriting alter_schema, and diff said the
    families were altered."""
    conn = merkle.connect("memory://")
    db = conn.create_db("d")
    db = db.create_table("t", key="k", families={"E": set(), "A": {"a"}}).commit()
    db = db.write("t", [{"k": i, "a": i, "c": 1} for i in range(10)]).commit()
    after = db.alter_schema("t", **change).commit()
    assert after.describe_table("t")["families"] == {"E": [], "A": ["a"]}
    assert after.diff(db)["t"].altered == ["schema"]


def test_dropping_a_familys_only_member_keeps_the_family_empty() -> None:
    conn = merkle.connect("memory://")
    db = conn.create_db("d")
    db = db.create_table("t", key="k", families={"A": {"a"}, "B": {"b"}}).commit()
    db = db.write("t", [{"k": i, "a": i, "b": i} for i in range(10)]).commit()
    after = db.alter_schema("t", drop=["a"]).commit()
    assert after.describe_table("t")["families"] == {"A": [], "B": ["b"]}
    assert after.write("t", [{"k": 99, "a": 1}]).get_records("t", [99]) == {99: {"k": 99, "a": 1}}
    _validate(after)
