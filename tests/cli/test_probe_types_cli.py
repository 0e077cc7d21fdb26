"""``merkle scan -f jsonl|csv`` then ``merkle load``: typed fields read back exactly.

Each test reproduces a finding of an adversarial probe of the command line's
export-then-load round trip (doc/cli.md, "Export, then load: the same records")
and its value checks ("No value is rounded, cut or made infinite"); its
docstring says what the command did before.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import merkle

from .helpers import Run

UUID = uuid.UUID(int=5).bytes
#: The least and the greatest duration[us] a read gives as a timedelta (``-(2**63)``
#: itself is beyond Python's timedelta).
LEAST_US = -(2**63) + 1
GREATEST_US = 2**63 - 1


def _roundtrip(
    run: Run, conn: merkle.Connection, tmp_path: Path, kind: pa.DataType, array: pa.Array, fmt: str
) -> None:
    """Store ``array`` in a field of ``kind``, export the table as ``fmt``, load the export
    back: the load finds the same records and commits nothing."""
    schema = pa.schema([("k", pa.int64()), ("v", kind)])
    data = pa.table({"k": list(range(1, len(array) + 1)), "v": array}, schema=schema)
    db = conn.create_db("d").create_table("t", key="k", schema=schema).write("t", data).commit()
    before = db.to_arrow("t").column("v").to_pylist()
    path = tmp_path / f"t.{fmt}"
    path.write_text(run.ok("scan", "d", "t", "-f", fmt).stdout)
    out = run.ok("load", "d", "t", str(path)).stdout
    assert out.startswith("no change: d.t already holds"), out
    opened = conn.open_db("d")
    assert opened.version == db.version
    assert opened.to_arrow("t").column("v").to_pylist() == before


def _load(
    run: Run, conn: merkle.Connection, tmp_path: Path, kind: pa.DataType, name: str, text: str
) -> merkle.Database:
    """An empty table ``d.t`` with a field ``v`` of ``kind``, and the file ``name`` of
    ``text`` beside it (the caller loads it); the database as created."""
    schema = pa.schema([("k", pa.int64()), ("v", kind)])
    db = conn.create_db("d").create_table("t", key="k", schema=schema).commit()
    (tmp_path / name).write_text(text)
    return db


# -- finding 5: every type of bytes is read from hex -----------------------------------

BYTES_CASES: dict[str, tuple[pa.DataType, list[Any]]] = {
    "binary_view": (pa.binary_view(), [b"zz", b"\x00\xff", b""]),
    "list<binary_view>": (pa.list_(pa.binary_view()), [[b"zz", b"\x00"]]),
    "large_list<binary_view>": (pa.large_list(pa.binary_view()), [[b"zz"]]),
    "struct<binary_view>": (pa.struct([("x", pa.binary_view())]), [{"x": b"zz"}]),
    "map<string, binary_view>": (pa.map_(pa.string(), pa.binary_view()), [[("a", b"zz")]]),
}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("case", list(BYTES_CASES))
def test_bytes_of_every_type_load_back_from_their_hex(
    run: Run, conn: merkle.Connection, tmp_path: Path, case: str, fmt: str
) -> None:
    """Before: a binary_view field (inside a list, struct or map too) stored the hex
    TEXT of the export as its bytes: b"zz" came back as b"7a7a" (b"37613761" after a
    second round), and the load committed that."""
    kind, values = BYTES_CASES[case]
    _roundtrip(run, conn, tmp_path, kind, pa.array(values, kind), fmt)


def test_run_end_encoded_bytes_load_back_from_their_hex(
    run: Run, conn: merkle.Connection, tmp_path: Path
) -> None:
    """Before: a run-end encoded binary field stored the export's hex text as bytes."""
    array = pa.RunEndEncodedArray.from_arrays(pa.array([1], pa.int32()), pa.array([b"zz"]))
    _roundtrip(run, conn, tmp_path, array.type, array, "jsonl")


@pytest.mark.parametrize(
    ("name", "text"), [("a.jsonl", '{"k": 1, "v": "zz"}\n'), ("a.csv", "k,v\n1,zz\n")]
)
def test_a_binary_view_value_that_is_not_hex_is_refused(
    run: Run, conn: merkle.Connection, tmp_path: Path, name: str, text: str
) -> None:
    """Before: text that is not hex was stored as its UTF-8 bytes in a binary_view field."""
    db = _load(run, conn, tmp_path, pa.binary_view(), name, text)
    line = run.fails("load", "d", "t", str(tmp_path / name))
    assert "row 1, field 'v', key 1: value 'zz' is not binary_view: write hexadecimal" in line
    assert conn.open_db("d").version == db.version


# -- finding 6: typed fields whose export did not load back ----------------------------


def _ree(values: pa.Array) -> pa.Array:
    return pa.RunEndEncodedArray.from_arrays(pa.array([len(values)], pa.int32()), values[:1])


TYPED_CASES: dict[str, pa.Array] = {
    "uuid": pa.ExtensionArray.from_storage(pa.uuid(), pa.array([UUID], pa.binary(16))),
    "list<uuid>": pa.array([[UUID]], pa.list_(pa.binary(16))).cast(pa.list_(pa.uuid())),
    "struct<uuid>": pa.array([{"x": UUID}], pa.struct([("x", pa.binary(16))])).cast(
        pa.struct([("x", pa.uuid())])
    ),
    "interval": pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval()),
    "list<interval>": pa.array(
        [[pa.MonthDayNano([-1, 0, 5])]], pa.list_(pa.month_day_nano_interval())
    ),
    "bool8": pa.ExtensionArray.from_storage(pa.bool8(), pa.array([1, 0], pa.int8())),
    "list<bool8>": pa.array([[True, False]], pa.list_(pa.bool_())).cast(pa.list_(pa.bool8())),
    "ree<string>": _ree(pa.array(["a"])),
    "ree<int64>": _ree(pa.array([5])),
    "string with NUL": pa.array(["a\x00b", "\x00"], pa.string()),
    "least duration[us]": pa.array([LEAST_US, GREATEST_US], pa.duration("us")),
    "list<least duration[us]>": pa.ListArray.from_arrays(
        pa.array([0, 2], pa.int32()), pa.array([LEAST_US, GREATEST_US], pa.duration("us"))
    ),
}


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("case", list(TYPED_CASES))
def test_a_typed_export_loads_back(
    run: Run, conn: merkle.Connection, tmp_path: Path, case: str, fmt: str
) -> None:
    """Before: the load of the export was an error: a uuid's text "does not fit
    extension<arrow.uuid>", an interval's [1, 2, 3] "write text", bool8's true "is not
    extension<arrow.bool8>", a run-end encoded CSV cell was parsed as JSON, a CSV file
    with a NUL character in a cell "is not csv text", and the least duration[us]
    ("-106751992 days, 19:59:05.224193") overflowed pyarrow's conversion."""
    array = TYPED_CASES[case]
    _roundtrip(run, conn, tmp_path, array.type, array, fmt)


@pytest.mark.parametrize(
    ("kind", "name", "text", "expected"),
    [
        (
            pa.uuid(),
            "a.jsonl",
            '{"k": 1, "v": "nope"}\n',
            "value 'nope' is not extension<arrow.uuid>: write a UUID",
        ),
        (
            pa.uuid(),
            "a.csv",
            "k,v\n1,zz\n",
            "value 'zz' is not extension<arrow.uuid>: write a UUID",
        ),
        (
            pa.month_day_nano_interval(),
            "a.jsonl",
            '{"k": 1, "v": [1, 2]}\n',
            "value [1, 2] is not month_day_nano_interval: write [months, days, nanoseconds]",
        ),
        (
            pa.bool8(),
            "a.jsonl",
            '{"k": 1, "v": 1}\n',
            "value 1 is not extension<arrow.bool8>: write true or false",
        ),
        (
            pa.bool8(),
            "a.csv",
            "k,v\n1,maybe\n",
            "value 'maybe' is not extension<arrow.bool8>: write true",
        ),
    ],
)
def test_a_typed_value_that_does_not_convert_is_one_line_naming_it(
    run: Run,
    conn: merkle.Connection,
    tmp_path: Path,
    kind: pa.DataType,
    name: str,
    text: str,
    expected: str,
) -> None:
    """Before: 'write text' for a uuid or an interval (text is refused), and bool8 named
    as its storage's need ('write text'); now each says how such a value is written."""
    db = _load(run, conn, tmp_path, kind, name, text)
    line = run.fails("load", "d", "t", str(tmp_path / name))
    assert "row 1, field 'v', key 1: " + expected in line
    assert conn.open_db("d").version == db.version


def test_a_uuid_written_as_32_hex_digits_loads(
    run: Run, conn: merkle.Connection, tmp_path: Path
) -> None:
    """A UUID's text is read as ``uuid.UUID`` reads it: with or without its dashes."""
    _load(run, conn, tmp_path, pa.uuid(), "a.jsonl", '{"k": 1, "v": "%s"}\n' % ("0" * 31 + "5"))
    run.ok("load", "d", "t", str(tmp_path / "a.jsonl"))
    assert conn.open_db("d").to_arrow("t").column("v").to_pylist() == [uuid.UUID(int=5)]


@pytest.mark.parametrize(
    "head",
    [
        "k,v\n1,a\n".encode("utf-16"),  # a byte order mark, then a NUL beside each character
        "k,v\n1,a\n".encode("utf-16-le"),  # no mark: NUL bytes are half of the bytes
        b"k,v\n1,\xff\x00\xfe\n",  # NUL among bytes that are not UTF-8: binary data
    ],
)
def test_a_csv_file_that_is_not_utf8_text_with_nul_bytes_is_still_refused(
    run: Run, conn: merkle.Connection, tmp_path: Path, head: bytes
) -> None:
    """A CSV cell may hold a NUL now; UTF-16 text and binary data are still one line."""
    _load(run, conn, tmp_path, pa.string(), "a.csv", "")
    (tmp_path / "a.csv").write_bytes(head)
    line = run.fails("load", "d", "t", str(tmp_path / "a.csv"))
    assert "is not csv text: it holds NUL bytes" in line


# -- finding 13: no text value is rounded into float32 or float16 ----------------------


@pytest.mark.parametrize(
    ("kind", "held"), [(pa.float32(), "0.10000000149011612"), (pa.float16(), "0.0999755859375")]
)
@pytest.mark.parametrize(
    ("name", "text", "shown"),
    [
        ("a.csv", "k,v\n1,0.1\n", "'0.1'"),
        ("a.jsonl", '{"k": 1, "v": 0.1}\n', "0.1"),
        ("a.jsonl", '{"k": 1, "v": "0.1"}\n', "'0.1'"),
    ],
)
def test_a_number_a_narrow_float_holds_only_rounded_is_refused(
    run: Run,
    conn: merkle.Connection,
    tmp_path: Path,
    kind: pa.DataType,
    held: str,
    name: str,
    text: str,
    shown: str,
) -> None:
    """Before: 0.1 from CSV or JSON Lines was stored as float32's 0.10000000149011612
    (float16's 0.0999755859375) without a word, while Parquet and Database.write
    refuse it."""
    db = _load(run, conn, tmp_path, kind, name, text)
    line = run.fails("load", "d", "t", str(tmp_path / name))
    width = f"float{kind.bit_width}"
    assert (
        f"row 1, field 'v', key 1: value {shown} is not a {width} number ({width} holds it "
        f"only as {held}): write a number {width} holds, or widen the field to float64"
    ) in line
    assert conn.open_db("d").version == db.version


@pytest.mark.parametrize(
    ("kind", "name", "text", "expected"),
    [
        (
            pa.float32(),
            "a.jsonl",
            '{"k": 1, "v": 16777217}\n',
            "float32 holds it only as 16777216.0",
        ),
        (
            pa.list_(pa.float32()),
            "a.jsonl",
            '{"k": 1, "v": [0.5, 0.1]}\n',
            "an item: float32 holds it only as 0.10000000149011612",
        ),
        (
            pa.list_(pa.float32()),
            "a.csv",
            "k,v\n1,[0.1]\n",
            "an item: float32 holds it only as 0.10000000149011612",
        ),
        (
            pa.struct([("x", pa.float16())]),
            "a.jsonl",
            '{"k": 1, "v": {"x": 0.1}}\n',
            "its member 'x': float16 holds it only as",
        ),
        (
            pa.list_(pa.duration("s")),
            "a.jsonl",
            '{"k": 1, "v": ["0:00:01.500000"]}\n',
            "has a fraction of a second finer than the field's unit (s)",
        ),
        (
            pa.list_(pa.time32("s")),
            "a.jsonl",
            '{"k": 1, "v": ["01:02:03.500000"]}\n',
            "is not time32[s]: it has a fraction of a second finer than its unit (s: whole",
        ),
        (
            pa.duration("s"),
            "a.csv",
            "k,v\n1,0:00:01.500000\n",
            "has a fraction of a second finer than the field's unit (s)",
        ),
    ],
)
def test_a_value_rounded_or_cut_inside_a_field_is_refused(
    run: Run,
    conn: merkle.Connection,
    tmp_path: Path,
    kind: pa.DataType,
    name: str,
    text: str,
    expected: str,
) -> None:
    """Before: a list's float32 item (a struct's float16 member) was rounded, a list's
    duration[s] or time32[s] item cut to whole seconds without a word, and a duration[s]
    field's fraction refused as 'does not fit', naming no reason."""
    db = _load(run, conn, tmp_path, kind, name, text)
    line = run.fails("load", "d", "t", str(tmp_path / name))
    assert "row 1, field 'v', key 1: value " in line
    assert expected in line
    assert conn.open_db("d").version == db.version


@pytest.mark.parametrize("kind", [pa.float32(), pa.float16()])
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("a.csv", "k,v\n1,0.5\n2,NaN\n3,-inf\n4, 0.25\n5,\n"),
        (
            "a.jsonl",
            '{"k":1,"v":0.5}\n{"k":2,"v":"NaN"}\n{"k":3,"v":"-Infinity"}\n{"k":4,"v":0.25}\n{"k":5}\n',
        ),
    ],
)
def test_numbers_a_narrow_float_holds_still_load(
    run: Run, conn: merkle.Connection, tmp_path: Path, kind: pa.DataType, name: str, text: str
) -> None:
    """The check refuses rounding only: exact numbers, NaN, the infinities and no value
    load as they are."""
    _load(run, conn, tmp_path, kind, name, text)
    run.ok("load", "d", "t", str(tmp_path / name))
    got = conn.open_db("d").to_arrow("t").column("v").to_pylist()
    assert got[0] == 0.5
    assert math.isnan(got[1])
    assert got[2] == -math.inf
    assert got[3:] == [0.25, None]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("kind", [pa.float32(), pa.float16(), pa.list_(pa.float32())])
def test_a_narrow_float_export_loads_back(
    run: Run, conn: merkle.Connection, tmp_path: Path, kind: pa.DataType, fmt: str
) -> None:
    """The export writes a float32's 0.1 as the number it holds (0.10000000149011612),
    which it holds exactly: the check never refuses the table's own export."""
    values: list[Any] = [[0.1, 1 / 3]] if pa.types.is_list(kind) else [0.1, 1 / 3, 65504.0]
    array = pa.array(values, pa.list_(pa.float64()) if pa.types.is_list(kind) else pa.float64())
    _roundtrip(run, conn, tmp_path, kind, array.cast(kind, safe=False), fmt)


def test_a_time_value_still_loads_with_its_own_unit(
    run: Run, conn: merkle.Connection, tmp_path: Path
) -> None:
    """Durations are now built from their count of the field's unit: whole seconds and
    milliseconds load as they did."""
    text = '{"k": 1, "v": "1 day, 0:00:05"}\n{"k": 2, "v": "-1 day, 23:59:59"}\n'
    _load(run, conn, tmp_path, pa.duration("s"), "a.jsonl", text)
    run.ok("load", "d", "t", str(tmp_path / "a.jsonl"))
    got = conn.open_db("d").to_arrow("t").column("v").to_pylist()
    assert got == [dt.timedelta(days=1, seconds=5), dt.timedelta(seconds=-1)]
