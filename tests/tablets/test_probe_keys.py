"""Tests of a table's key codec against its key types, its families and foreign tablets.

What the probes found (each test below would have caught one):

- ``build_table`` took tablets written under another key codec of the same Arrow type
  (``reverse(int)`` tablets into an ``int`` table): scans out of order, lookups missing,
  a later write counted twice;
- ``build_table`` took tablets of a table keyed on another field;
- ``build_table`` took tablets of another key type into a table not yet written (a
  committed table whose reads raised IntegrityError), and refused them with an
  IntegrityError, as if corrupt, when the table had a schema;
- ``create_table(key_codec=..., schema=...)`` and ``alter_schema(add={key: type})`` took
  a key type the codec cannot store (``int`` with a string key): no write fitted both;
- ``alter_families`` put a field of a composite key into a family, which
  ``create_table`` refuses.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.errors import SchemaError, UsageError


def _db() -> merkle.Database:
    return merkle.connect("memory://").create_db("d")


def _with_tablets(db: merkle.Database, name: str, records: list[dict[str, Any]]) -> list[str]:
    """The ids of ``name``'s tablets after writing ``records`` (committed, compacted)."""
    db = db.write(name, records).compact(name).commit()
    ids = [t["id"] for t in db.list_tablets(name)]
    assert ids
    return ids


def _untouched(db: merkle.Database, name: str) -> None:
    """``name`` as created: no records, no tablets, no schema."""
    info = db.describe_table(name)
    assert info["count"] == 0
    assert info["schema"] is None
    assert list(db.scan(name)) == []
    assert db.list_tablets(name) == []


# -- build_table: the tablets' key codec --------------------------------------------------

ORDERS = [
    ("reverse(int)", "int", "k", [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]),
    ("int", "reverse(int)", "k", [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}]),
    ("reverse(str)", "str", "k", [{"k": "a", "v": "a"}, {"k": "b", "v": "b"}]),
    (
        "tuple(str,reverse(int))",
        "tuple(str,int)",
        ["g", "n"],
        [{"g": "a", "n": 1, "v": "a"}, {"g": "a", "n": 2, "v": "b"}],
    ),
]


@pytest.mark.parametrize(("written", "table", "key", "records"), ORDERS)
def test_build_table_refuses_tablets_of_another_key_order(
    written: str, table: str, key: str | list[str], records: list[dict[str, Any]]
) -> None:
    db = _db().create_table("src", key=key, key_codec=written)
    db = db.create_table("dst", key=key, key_codec=table).commit()
    ids = _with_tablets(db, "src", records)
    db = db.commit()
    with pytest.raises(
        UsageError, match=rf"key codec '{re.escape(written)}'.*key codec is '{re.escape(table)}'"
    ):
        db.build_table("dst", ids)
    _untouched(db, "dst")


def test_build_table_refuses_tablets_of_another_key_order_of_one_record() -> None:
    db = _db().create_table("src", key="k", key_codec="reverse(int)")
    db = db.create_table("dst", key="k", key_codec="int").commit()
    ids = _with_tablets(db, "src", [{"k": 5}])
    with pytest.raises(UsageError, match=r"'reverse\(int\)'.*'int'"):
        db.build_table("dst", ids)


# -- build_table: the tablets' key field --------------------------------------------------


def test_build_table_refuses_tablets_keyed_on_another_field() -> None:
    db = _db().create_table("a", key="k", key_codec="int")
    db = db.create_table("b", key="id", key_codec="int").commit()
    ids = _with_tablets(db, "b", [{"id": 1, "k": 20}, {"id": 2, "k": 10}])
    with pytest.raises(UsageError, match=r"key field 'id'.*key field 'k'"):
        db.build_table("a", ids)
    _untouched(db, "a")


def test_build_table_refuses_tablets_of_another_composite_key() -> None:
    db = _db().create_table("a", key=["g", "n"], key_codec="tuple(str,int)")
    db = db.create_table("b", key=["g", "m"], key_codec="tuple(str,int)").commit()
    ids = _with_tablets(db, "b", [{"g": "x", "m": 1}])
    with pytest.raises(UsageError, match=r"\['g', 'm'\].*\['g', 'n'\]"):
        db.build_table("a", ids)
    _untouched(db, "a")


# -- build_table: the tablets' key type ---------------------------------------------------


@pytest.mark.parametrize("declared", [False, True], ids=["no-schema", "schema"])
def test_build_table_refuses_tablets_of_another_key_type(declared: bool) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())]) if declared else None
    db = _db().create_table("s", key="k", key_codec="str")
    db = db.create_table("t", key="k", key_codec="int", schema=schema).commit()
    ids = _with_tablets(db, "s", [{"k": "a", "v": 1}])
    with pytest.raises(UsageError, match=r"key codec 'str'.*key codec is 'int'.*string.*int64"):
        db.build_table("t", ids)
    info = db.describe_table("t")
    assert info["count"] == 0
    assert db.list_tablets("t") == []
    assert info["schema"] == schema
    after = db.write("t", [{"k": 1, "v": 2}]).commit()
    assert list(after.scan("t")) == [{"k": 1, "v": 2}]


# -- build_table: tablets of the same key are still taken -----------------------------------

SAME = [
    ("int", "k", [{"k": i, "v": i} for i in (3, 1, 2)]),
    ("reverse(int)", "k", [{"k": i, "v": i} for i in (3, 1, 2)]),
    ("str", "k", [{"k": s, "v": 0} for s in "bca"]),
    ("tuple(str,reverse(int))", ["g", "n"], [{"g": g, "n": n} for g in "ba" for n in (1, 2)]),
    ("reverse(tuple(str,int))", ["g", "n"], [{"g": g, "n": n} for g in "ba" for n in (1, 2)]),
]


@pytest.mark.parametrize(("codec", "key", "records"), SAME)
def test_build_table_takes_tablets_of_the_same_key(
    codec: str, key: str | list[str], records: list[dict[str, Any]]
) -> None:
    db = _db().create_table("src", key=key, key_codec=codec, tablet_size_limit=2)
    db = db.create_table("dst", key=key, key_codec=codec).commit()
    ids = _with_tablets(db, "src", records)
    db = db.commit()
    built = db.build_table("dst", ids).commit()
    assert list(built.scan("dst")) == list(built.scan("src"))
    fields = [key] if isinstance(key, str) else key
    keys = [r[fields[0]] if len(fields) == 1 else tuple(r[f] for f in fields) for r in records]
    assert len(built.get_records("dst", keys)) == len(records)
    rewritten = built.write("dst", [records[0]]).commit()
    assert rewritten.describe_table("dst")["count"] == len(records)


# -- create_table: a key codec must store the declared key types --------------------------

MISFITS = [
    ("int", pa.string()),
    ("str", pa.int64()),
    ("timestamp", pa.int64()),
    ("int", pa.float64()),
    ("reverse(int)", pa.float64()),
    ("float", pa.int64()),
    ("bytes", pa.string()),
    ("str", pa.binary()),
]


@pytest.mark.parametrize(("codec", "kind"), MISFITS, ids=lambda x: str(x))
def test_create_table_refuses_a_key_type_its_codec_cannot_store(
    codec: str, kind: pa.DataType
) -> None:
    db = _db()
    schema = pa.schema([("k", kind), ("v", pa.int64())])
    with pytest.raises(UsageError, match=rf"key field 'k' is {kind}.*{re.escape(codec)}"):
        db.create_table("t", key="k", key_codec=codec, schema=schema)
    assert not db.has_table("t")


def test_create_table_refuses_a_composite_key_type_its_codec_cannot_store() -> None:
    db = _db()
    schema = pa.schema([("g", pa.string()), ("n", pa.string())])
    with pytest.raises(UsageError, match=r"key field 'n' is string.*'tuple\(str,int\)'.*'int'"):
        db.create_table("t", key=["g", "n"], key_codec="tuple(str,int)", schema=schema)
    with pytest.raises(UsageError, match=r"key field 'g' is string"):
        db.create_table("t", key=["g", "n"], key_codec="tuple(reverse(int),str)", schema=schema)
    assert not db.has_table("t")


FITS = [
    ("int", pa.int64(), [3, 1]),
    ("int", pa.int32(), [3, 1]),
    ("reverse(int)", pa.int8(), [3, 1]),
    ("float", pa.float32(), [2.5, 1.5]),
    ("str", pa.large_string(), ["b", "a"]),
    ("reverse(str)", pa.string(), ["b", "a"]),
    ("bytes", pa.binary(), [b"b", b"a"]),
    ("timestamp", pa.timestamp("us", "UTC"), None),
]


@pytest.mark.parametrize(("codec", "kind", "keys"), FITS, ids=lambda x: str(x))
def test_create_table_takes_a_key_codec_of_the_key_type(
    codec: str, kind: pa.DataType, keys: list[Any] | None
) -> None:
    schema = pa.schema([("k", kind), ("v", pa.int64())])
    db = _db().create_table("t", key="k", key_codec=codec, schema=schema).commit()
    assert db.describe_table("t")["key_codec"] == codec
    if keys is not None:
        db = db.write("t", [{"k": k, "v": i} for i, k in enumerate(keys)]).commit()
        assert sorted(db.get_records("t", keys)) == sorted(keys)


@pytest.mark.parametrize(
    "codec",
    [
        "tuple(str,int)",
        "tuple(reverse(str),int)",
        "tuple(str,reverse(int))",
        "reverse(tuple(str,int))",
    ],
)
def test_create_table_takes_a_tuple_codec_of_the_key_types(codec: str) -> None:
    schema = pa.schema([("g", pa.string()), ("n", pa.int32()), ("v", pa.int64())])
    db = _db().create_table("t", key=["g", "n"], key_codec=codec, schema=schema).commit()
    db = db.write("t", [{"g": "a", "n": 1, "v": 1}, {"g": "b", "n": 2, "v": 2}]).commit()
    assert set(db.get_records("t", [("a", 1), ("b", 2)])) == {("a", 1), ("b", 2)}


# -- alter_schema: a key field typed before the first write ---------------------------------


@pytest.mark.parametrize(("codec", "kind"), MISFITS, ids=lambda x: str(x))
def test_alter_schema_refuses_adding_a_key_type_the_codec_cannot_store(
    codec: str, kind: pa.DataType
) -> None:
    db = _db().create_table("t", key="k", key_codec=codec).commit()
    with pytest.raises(SchemaError, match=rf"table 't': key field 'k' is {kind}"):
        db.alter_schema("t", add={"k": kind})
    _untouched(db, "t")


def test_alter_schema_refuses_widening_an_untyped_key_to_a_type_the_codec_cannot_store() -> None:
    db = _db().create_table("t", key="k", key_codec="int").commit()
    with pytest.raises(SchemaError, match=r"key field 'k' is string.*'int'"):
        db.alter_schema("t", widen={"k": pa.string()})
    _untouched(db, "t")


def test_alter_schema_refuses_adding_a_composite_key_type_the_codec_cannot_store() -> None:
    db = _db().create_table("t", key=["g", "n"], key_codec="tuple(reverse(str),int)").commit()
    with pytest.raises(SchemaError, match=r"key field 'n' is string.*'int'"):
        db.alter_schema("t", add={"n": pa.string()})
    with pytest.raises(SchemaError, match=r"key field 'g' is int64.*'str'"):
        db.alter_schema("t", add={"g": pa.int64(), "n": pa.int64()})
    _untouched(db, "t")


@pytest.mark.parametrize(("codec", "kind", "keys"), FITS, ids=lambda x: str(x))
def test_alter_schema_adds_a_key_type_the_codec_stores(
    codec: str, kind: pa.DataType, keys: list[Any] | None
) -> None:
    db = _db().create_table("t", key="k", key_codec=codec)
    db = db.alter_schema("t", add={"k": kind}).commit()
    assert db.describe_table("t")["schema"].field("k").type == kind
    if keys is not None:
        db = db.write("t", [{"k": k} for k in keys]).commit()
        assert sorted(db.get_records("t", keys)) == sorted(keys)


def test_alter_schema_adds_composite_key_types_the_tuple_codec_stores() -> None:
    db = _db().create_table("t", key=["g", "n"], key_codec="tuple(reverse(str),int)")
    db = db.alter_schema("t", add={"g": pa.large_string(), "n": pa.int8()}).commit()
    db = db.write("t", [{"g": "a", "n": 1}, {"g": "b", "n": 2}]).commit()
    assert [(r["g"], r["n"]) for r in db.scan("t")] == [("b", 2), ("a", 1)]


def test_alter_schema_adds_a_key_type_to_a_table_without_a_codec() -> None:
    db = _db().create_table("t", key="k").alter_schema("t", add={"k": pa.string()}).commit()
    db = db.write("t", [{"k": "a"}]).commit()
    assert db.describe_table("t")["key_codec"] == "str"


# -- alter_families: no field of a composite key in a family ------------------------------


def test_alter_families_refuses_a_composite_key_field_as_create_table_does() -> None:
    db = _db()
    with pytest.raises(UsageError, match=r"^the key field 'n' cannot belong to family 'F'$"):
        db.create_table("t", key=["g", "n"], families={"F": {"n"}})
    db = db.create_table("t", key=["g", "n"], tablet_size_limit=2, patch_limit=0, patch_share=0)
    db = db.write("t", [{"g": "a", "n": i, "v": i} for i in range(4)]).commit()
    for families in ({"F": {"n"}}, {"F": {"v"}, "G": {"g"}}):
        with pytest.raises(UsageError, match=r"the key field '[gn]' cannot belong to family"):
            db.alter_families("t", families)
    assert db.describe_table("t")["families"] == {}
    moved = db.alter_families("t", {"F": {"v"}}).commit()
    assert moved.describe_table("t")["families"] == {"F": ["v"]}
    assert list(moved.scan("t")) == list(db.scan("t"))


# -- build_table: tablets of a table with bigger limits -------------------------------------


@pytest.mark.parametrize(("src_limit", "rows"), [(None, 2_000), (2_000, 600)])
def test_build_table_cuts_tablets_bigger_than_its_limits(src_limit: int | None, rows: int) -> None:
    """A tablet of more records than the table's ``tablet_size_limit`` (2,000 into 100), or
    of pages of more records than its pages hold (pages of 200 into pages of at most 125),
    is cut again: kept as it was, the table failed validation until a write touched it."""
    from merkle.tablets.validate import validate

    db = _db().create_table("src", key="k", key_codec="int", tablet_size_limit=src_limit)
    db = db.create_table(
        "dst", key="k", key_codec="int", tablet_size_limit=1_000 if src_limit else 100
    )
    db = db.commit()
    records = [{"k": i, "v": f"v{i}"} for i in range(rows)]
    db = db.build_table("dst", _with_tablets(db, "src", records)).commit()
    validate(db._ts, db._table("dst"))
    assert list(db.scan("dst")) == records
    assert db.get_records("dst", [rows - 1]) == {rows - 1: records[-1]}
