"""Types named on the command line, and times loaded with every digit (types probe CLI 2).

Each test reproduces a finding of an adversarial probe of the command line; its
docstring says what the command did before.

- Types: doc/cli.md, "A TYPE is written as Arrow prints it (and as ``table
  describe`` shows it)". ``--schema``, ``--add`` and ``--column-types`` said
  "unknown type" for ``fixed_size_binary[16]``, ``dictionary<values=string,
  indices=int32, ordered=0>``, ``fixed_size_list<item: int16>[2]``,
  ``list_view<...>``, ``extension<arrow.uuid>``, ``map<..., keys_sorted>``, ...
- Times: doc/cli.md, "No value is rounded, cut or made infinite". ``merkle load``
  read a time or timestamp through Python's ``fromisoformat``, which keeps six
  digits of a second: ``00:00:00.000000001`` into ``time64[ns]`` stored 0, and
  ``00:00:00.0000015`` into ``time64[us]`` stored 1 us, without a word.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import merkle
from merkle.cli.typenames import parse_fields, parse_type, parse_types

from .helpers import Run

# --- Types as Arrow prints them ----------------------------------------------------

_UNITS = st.sampled_from(["s", "ms", "us", "ns"])
_ZONES = st.sampled_from([None, "UTC", "Europe/Berlin", "+05:30", "-03:00"])
_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}( [A-Za-z0-9_]{1,3})?", fullmatch=True)
_INDICES = st.sampled_from(
    [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32()]
)
#: Every type without children that the docs name (doc/api.md, "Schemas"; doc/cli.md).
_SIMPLE = [
    pa.null(),
    pa.bool_(),
    *(pa.int8(), pa.int16(), pa.int32(), pa.int64()),
    *(pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()),
    pa.float16(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.string_view(),
    pa.binary(),
    pa.large_binary(),
    pa.binary_view(),
    pa.date32(),
    pa.date64(),
    pa.time32("s"),
    pa.time32("ms"),
    pa.time64("us"),
    pa.time64("ns"),
    pa.month_day_nano_interval(),
    pa.uuid(),
    pa.json_(),
    pa.bool8(),
]


def _decimals() -> st.SearchStrategy[pa.DataType]:
    widths = [(pa.decimal32, 9), (pa.decimal64, 18), (pa.decimal128, 38), (pa.decimal256, 76)]
    return st.sampled_from(widths).flatmap(
        lambda width: st.integers(1, width[1]).flatmap(
            lambda precision: st.integers(-5, precision).map(
                lambda scale: width[0](precision, scale)
            )
        )
    )


_LEAVES = st.one_of(
    st.sampled_from(_SIMPLE),
    _decimals(),
    st.integers(0, 64).map(pa.binary),
    st.builds(pa.timestamp, _UNITS, tz=_ZONES),
    _UNITS.map(pa.duration),
    st.builds(
        pa.dictionary,
        _INDICES,
        st.sampled_from([pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]),
        st.booleans(),
    ),
    st.builds(
        pa.opaque,
        st.sampled_from([pa.binary(), pa.int32(), pa.struct([("a", pa.int8())])]),
        _NAMES,
        _NAMES,
    ),
    st.builds(
        pa.fixed_shape_tensor,
        st.sampled_from([pa.int32(), pa.float32()]),
        st.lists(st.integers(1, 4), min_size=2, max_size=2),
        permutation=st.sampled_from([None, [1, 0]]),
        dim_names=st.sampled_from([None, ["x", "y"]]),
    ),
)
#: Map keys: what a map's key may be (hashable, not null).
_KEYS = st.sampled_from([pa.string(), pa.int64(), pa.binary(), pa.date32(), pa.timestamp("us")])


def _field(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.Field]:
    # (a field of type null holds nulls only: Arrow refuses it NOT NULL)
    return st.builds(
        lambda name, kind, nullable: pa.field(name, kind, nullable or kind == pa.null()),
        _NAMES,
        children,
        st.booleans(),
    )


def _struct(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    return st.lists(_field(children), max_size=3, unique_by=lambda f: f.name).map(pa.struct)


def _union(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    members = st.lists(_field(children), min_size=1, max_size=3, unique_by=lambda f: f.name)
    kind = st.sampled_from([pa.dense_union, pa.sparse_union])
    return st.builds(lambda make, fields: make(fields), kind, members)


def _nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    items = st.one_of(children.map(lambda t: pa.field("item", t)), _field(children))
    lists = st.sampled_from([pa.list_, pa.large_list, pa.list_view, pa.large_list_view])
    # A map whose values are NOT NULL is left out: Arrow prints it as the nullable one.
    values = st.one_of(children, st.builds(pa.field, _NAMES, children))
    return st.one_of(
        st.builds(lambda make, item: make(item), lists, items),
        st.builds(pa.list_, items, st.integers(0, 5)),
        _struct(children),
        st.builds(pa.map_, _KEYS, values, keys_sorted=st.booleans()),
        st.builds(pa.run_end_encoded, st.sampled_from([pa.int16(), pa.int32()]), children),
        _union(children),
    )


TYPES = st.recursive(_LEAVES, _nested, max_leaves=8)


@settings(max_examples=400, deadline=None)
@given(TYPES)
def test_every_type_as_arrow_prints_it_parses_back(kind: pa.DataType) -> None:
    """``str(type)`` parses back to the same type, names and NOT NULL marks included.
    Before: fixed-size binary, fixed-size lists, list views, dictionaries, run-end
    encodings, unions, extension types and sorted maps were "unknown type"."""
    parsed = parse_type(str(kind))
    assert parsed == kind
    assert str(parsed) == str(kind)


@settings(max_examples=200, deadline=None)
@given(st.lists(_field(TYPES), min_size=1, max_size=3, unique_by=lambda f: f.name))
def test_a_schema_as_describe_shows_it_parses_back(fields: list[pa.Field]) -> None:
    """The ``schema`` lines of ``table describe`` (``name: type``, ``not null`` marked),
    joined by commas, are a ``--schema`` that declares the same fields. Before: ``not
    null`` was part of an unknown type."""
    shown = ",".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in fields)
    assert parse_fields(shown) == fields


#: Types of every kind the docs name, each stored by the Python API in the CLI tests.
STORED = [
    pa.binary(16),
    pa.dictionary(pa.int32(), pa.string()),
    pa.dictionary(pa.int8(), pa.binary(), ordered=True),
    pa.list_(pa.int16(), 2),
    pa.list_view(pa.int32()),
    pa.large_list_view(pa.string()),
    pa.uuid(),
    pa.json_(),
    pa.bool8(),
    pa.map_(pa.string(), pa.int64(), keys_sorted=True),
    pa.run_end_encoded(pa.int32(), pa.string()),
    pa.dense_union([pa.field("a", pa.int8()), pa.field("b", pa.string())]),
    pa.struct([pa.field("a", pa.list_(pa.field("x", pa.time64("ns"), nullable=False)))]),
    pa.list_(pa.struct([("t", pa.timestamp("ns", tz="+05:30")), ("d", pa.decimal256(50, -3))])),
    pa.opaque(pa.binary(), "thing", "vendor"),
    pa.fixed_shape_tensor(pa.float32(), [2, 2]),
    pa.month_day_nano_interval(),
    pa.float16(),
]


@pytest.mark.parametrize("kind", STORED, ids=str)
def test_a_type_describe_shows_creates_the_same_table(
    run: Run, conn: merkle.Connection, kind: pa.DataType
) -> None:
    """A table's schema lines, as ``table describe`` shows them, given to ``table create
    --schema`` make a table of the same schema. Before: "error: unknown type"."""
    schema = pa.schema([("k", pa.int64()), pa.field("v", kind, nullable=False)])
    conn.create_db("src").create_table("t", key="k", schema=schema).commit()
    shown = json.loads(run.ok("table", "describe", "src", "t", "-f", "json").output)["schema"]
    assert shown[1].endswith(" not null")
    run.ok("db", "create", "dst")
    run.ok("table", "create", "dst", "t", "--key", "k", "--schema", ",".join(shown))
    assert conn.open_db("dst").to_arrow("t").schema == conn.open_db("src").to_arrow("t").schema


def test_add_and_column_types_take_the_types_arrow_prints(
    run: Run, conn: merkle.Connection, tmp_path: Path
) -> None:
    """``table alter --add`` and ``load --column-types`` read the same names. Before:
    ``fixed_size_binary[4]`` and ``fixed_size_list<item: int16>[2]`` were unknown."""
    conn.create_db("d").create_table("t", key="k", schema=pa.schema([("k", pa.int64())])).commit()
    run.ok("table", "alter", "d", "t", "--add", "b:fixed_size_binary[4]")
    (tmp_path / "a.jsonl").write_text('{"k": 1, "p": [1, 2]}\n')
    column_types = "p:fixed_size_list<item: int16>[2]"
    run.ok(
        "load", "d", "u", str(tmp_path / "a.jsonl"), "--key", "k", "--column-types", column_types
    )
    db = conn.open_db("d")
    assert db.to_arrow("t").schema.field("b").type == pa.binary(4)
    assert db.to_arrow("u").column("p").type == pa.list_(pa.int16(), 2)
    assert db.to_arrow("u").column("p").to_pylist() == [[1, 2]]


def test_not_null_is_for_a_new_tables_schema_only(run: Run, conn: merkle.Connection) -> None:
    """``--add v:int64 not null`` is one line saying that ``not null`` is for ``--schema``
    (an added field holds nulls: its old records have none)."""
    conn.create_db("d").create_table("t", key="k", schema=pa.schema([("k", pa.int64())])).commit()
    line = run.fails("table", "alter", "d", "t", "--add", "v:int64 not null")
    assert "--add v:int64 not null" in line
    assert "--schema" in line
    assert parse_types("v:struct<a: int64 not null>") == {
        "v": pa.struct([pa.field("a", pa.int64(), nullable=False)])
    }


@pytest.mark.parametrize(
    "text",
    [
        "fixed_size_binary[x]",
        "fixed_size_list<int8>",
        "map<string>",
        "extension<acme.thing>",
        "dictionary<values=string>",
        "struct<a int8>",
        "list<int8>[2]",
    ],
)
def test_a_malformed_type_is_still_one_line_naming_it(run: Run, text: str) -> None:
    """A type Arrow does not print so is an error naming the type, not a traceback."""
    run.ok("db", "create", "d")
    line = run.fails("table", "create", "d", "t", "--key", "k", "--schema", f"k:int64,v:{text}")
    assert f"unknown type {text!r}" in line
    if text.startswith("extension<"):
        assert "Python API" in line


# --- Times and timestamps: every digit kept, or the value refused --------------------


def _write(tmp_path: Path, fmt: str, cell: str) -> Path:
    path = tmp_path / f"a.{fmt}"
    if fmt == "csv":
        with path.open("w", newline="") as out:
            csv.writer(out).writerows([["k", "v"], ["1", cell]])
    else:
        path.write_text(json.dumps({"k": 1, "v": cell}) + "\n")
    return path


KEPT = [
    ("time64[ns]", "00:00:00.000000001", 1),
    ("time64[ns]", "23:59:59.999999999", 86_399_999_999_999),
    ("time64[us]", "00:00:00.0000010", 1),
    ("time32[ms]", "00:00:01.5", 1500),
    ("timestamp[ns]", "2020-01-01T00:00:00.000000001", 1_577_836_800_000_000_001),
    ("timestamp[ns]", "2020-01-01T01:00:00.000000001+01:00", 1_577_836_800_000_000_001),
    ("timestamp[ns, tz=UTC]", "2020-01-01T00:00:00.123456789Z", 1_577_836_800_123_456_789),
    ("timestamp[us]", "2020-01-01T00:00:00.0000010", 1_577_836_800_000_001),
    ("timestamp[s]", "2020-01-01T00:00:00.000", 1_577_836_800),
]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize(("kind", "cell", "ticks"), KEPT)
def test_a_time_keeps_every_digit_its_unit_holds(
    run: Run, conn: merkle.Connection, tmp_path: Path, fmt: str, kind: str, cell: str, ticks: int
) -> None:
    """Every digit of a second the field's unit holds is stored. Before: a time kept six
    (``00:00:00.000000001`` into ``time64[ns]`` stored 0)."""
    path = _write(tmp_path, fmt, cell)
    run.ok("db", "create", "d")
    run.ok("load", "d", "t", str(path), "--key", "k", "--column-types", f"v:{kind}")
    stored = conn.open_db("d").to_arrow("t").column("v")
    assert str(stored.type) == kind
    ints = pa.int32() if pa.types.is_time32(stored.type) else pa.int64()
    assert stored.cast(ints).to_pylist() == [ticks]


CUT = [
    ("time64[us]", "00:00:00.0000015"),
    ("time64[ns]", "00:00:00.0000000015"),
    ("time32[ms]", "00:00:00.0005"),
    ("timestamp[us]", "2020-01-01T00:00:00.0000015"),
    ("timestamp[us, tz=UTC]", "2020-01-01T00:00:00.0000015+00:00"),
    ("timestamp[ns]", "2020-01-01T00:00:00.0000000001"),
    ("timestamp[ms]", "2020-01-01 00:00:00,0001"),
]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize(("kind", "cell"), CUT)
def test_a_time_finer_than_its_unit_is_refused_naming_it(
    run: Run, conn: merkle.Connection, tmp_path: Path, fmt: str, kind: str, cell: str
) -> None:
    """A fraction of a second finer than the unit is one line naming the row, field, key
    and value; nothing is stored. Before: cut to microseconds without a word."""
    path = _write(tmp_path, fmt, cell)
    run.ok("db", "create", "d")
    line = run.fails("load", "d", "t", str(path), "--key", "k", "--column-types", f"v:{kind}")
    assert f"row 1, field 'v', key 1: value {cell!r}" in line
    assert f"is not {kind}: it has a fraction of a second finer than its unit" in line
    assert conn.open_db("d").list_tables() == []


def test_nanoseconds_inside_lists_and_structs_are_kept(
    run: Run, conn: merkle.Connection, tmp_path: Path
) -> None:
    """Inside a list or a struct too. Before: read as Python's datetime and time (six
    digits), so the nanosecond was lost."""
    record = {
        "k": 1,
        "l": ["2020-01-01T00:00:00.000000001", None],
        "s": {"t": "00:00:00.000000007", "u": "2020-01-01T00:00:00.5+00:00"},
    }
    (tmp_path / "a.jsonl").write_text(json.dumps(record) + "\n")
    (tmp_path / "a.csv").write_text(
        "k,l,s\n1,"
        + '"'
        + json.dumps(record["l"]).replace('"', '""')
        + '","'
        + json.dumps(record["s"]).replace('"', '""')
        + '"\n'
    )
    types = "l:list<item: timestamp[ns]>,s:struct<t: time64[ns], u: timestamp[ms, tz=UTC]>"
    run.ok("db", "create", "d")
    for name in ("a.jsonl", "a.csv"):
        table = name.replace(".", "_")
        run.ok("load", "d", table, str(tmp_path / name), "--key", "k", "--column-types", types)
        data = conn.open_db("d").to_arrow(table)
        items = data.column("l").combine_chunks().flatten()
        assert items.cast(pa.int64()).to_pylist() == [1_577_836_800_000_000_001, None]
        members = data.column("s").combine_chunks()
        assert members.field("t").cast(pa.int64()).to_pylist() == [7]
        assert members.field("u").cast(pa.int64()).to_pylist() == [1_577_836_800_500]


def test_a_nested_time_finer_than_its_unit_is_refused(
    run: Run, conn: merkle.Connection, tmp_path: Path
) -> None:
    """A list's item finer than its unit is refused naming the row and the value.
    Before: ``00:00:00.0000015`` in a ``list<time64[us]>`` was stored as 1 us."""
    (tmp_path / "a.jsonl").write_text(json.dumps({"k": 1, "l": ["00:00:00.0000015"]}) + "\n")
    run.ok("db", "create", "d")
    line = run.fails(
        "load",
        "d",
        "t",
        str(tmp_path / "a.jsonl"),
        "--key",
        "k",
        "--column-types",
        "l:list<time64[us]>",
    )
    assert "row 1, field 'l', key 1: value ['00:00:00.0000015']" in line
    assert conn.open_db("d").list_tables() == []
