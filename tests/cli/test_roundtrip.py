"""``merkle load`` of ``merkle scan`` output gives back the records it came from.

Each test reproduces a finding of an adversarial test of the command line (its
docstring says what the command did before) and checks what it does now.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import merkle

from .helpers import Run

UTC = dt.UTC
#: A field of every type whose values the output writes as text (see doc/cli.md, "Values").
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("f", pa.float64()),
        ("f32", pa.float32()),
        ("d", pa.date32()),
        ("d64", pa.date64()),
        ("t", pa.time64("us")),
        ("t32", pa.time32("s")),
        ("ts", pa.timestamp("us")),
        ("tsz", pa.timestamp("us", tz="UTC")),
        ("tsb", pa.timestamp("ms", tz="Europe/Berlin")),
        ("dur", pa.duration("us")),
        ("dec", pa.decimal128(10, 2)),
        ("b", pa.binary()),
        ("lb", pa.large_binary()),
        ("fb", pa.binary(2)),
        ("s", pa.string()),
        ("l", pa.list_(pa.float64())),
        ("st", pa.struct([("x", pa.date32()), ("y", pa.binary())])),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("bo", pa.bool_()),
    ]
)
ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "f": math.nan,
        "f32": math.inf,
        "d": dt.date(2026, 1, 31),
        "d64": dt.date(1970, 1, 2),
        "t": dt.time(12, 0, 1, 5),
        "t32": dt.time(1, 2, 3),
        "ts": dt.datetime(2026, 1, 31, 12),
        "tsz": dt.datetime(2026, 1, 31, 12, tzinfo=UTC),
        "tsb": dt.datetime(2026, 6, 1, 8, 30, 0, 123000, tzinfo=UTC),
        "dur": dt.timedelta(days=1, seconds=5, microseconds=3),
        "dec": decimal.Decimal("12.50"),
        "b": b"\x00\xff",
        "lb": b"ab",
        "fb": b"\x00\x01",
        "s": "NaN",
        "l": [-math.inf, 1.5],
        "st": {"x": dt.date(2020, 1, 1), "y": b"\x01"},
        "m": [("a", 1)],
        "bo": True,
    },
    {"id": 2, "f": -math.inf, "dur": dt.timedelta(microseconds=-1), "s": "", "b": b""},
    {"id": 3, "f": 2.5, "dec": decimal.Decimal("-0.01"), "b": b"00ff"},
]


def _tables(shop: merkle.Database) -> merkle.Database:
    """``t``: every rendered type; ``k``: bytes keys; ``e``: str keys, the empty one too."""
    db = shop.create_table("t", key="id", schema=SCHEMA).write("t", ROWS)
    db = db.create_table("u", key="id", schema=SCHEMA)
    db = db.create_table("k", key="k", key_codec="bytes")
    db = db.write("k", [{"k": b"\x00\xff", "v": 1}, {"k": b"", "v": 2}, {"k": b"00ff", "v": 3}])
    db = db.create_table("e", key="k", key_codec="str")
    return db.write("e", [{"k": "", "v": 1}, {"k": "NaN", "v": 2}]).commit()


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize("table", ["t", "k", "e"])
def test_an_export_loads_back_as_the_records_it_came_from(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path, fmt: str, table: str
) -> None:
    """Before: jsonl was refused with a raw pyarrow message ("changed from number to
    string"), csv refused times and durations; bytes keys and fields of an export were
    stored as their hex text (b"00ff" for b"\\x00\\xff": a load ADDED records); the empty
    str key was refused ("the key 'k' is empty"), which Database.write accepts."""
    db = _tables(shop)
    path = tmp_path / f"{table}.{fmt}"
    path.write_text(run.ok("scan", "shop", table, "-f", fmt).stdout)
    out = run.ok("load", "shop", table, str(path)).stdout
    assert out.startswith(f"no change: shop.{table} already holds"), out
    assert conn.open_db("shop").version == db.version
    if table == "t":  # the same records again in an empty table of that schema
        run.ok("load", "shop", "u", str(path))
        for other in ("jsonl", "csv"):
            scanned = [run.ok("scan", "shop", name, "-f", other).stdout for name in ("t", "u")]
            assert scanned[0] == scanned[1]


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("a.jsonl", '{"id": 5, "f": "abc"}\n', "row 1, field 'f', key 5: value 'abc' is not"),
        ("a.jsonl", '{"id": 5, "b": "zz"}\n', "field 'b', key 5: value 'zz' is not binary: write"),
        ("a.csv", "id,b\n4,00\n5,zz\n", "row 2, field 'b', key 5: value 'zz' is not binary"),
        ("a.csv", "id,dur\n5,soon\n", "value 'soon' is not duration[us]: write a duration as"),
        (
            "a.jsonl",
            '{"id": 5, "t32": "01:02:03.5"}\n',
            "is not time32[s]: it has a fraction of a second finer than its unit (s: whole",
        ),
    ],
)
def test_a_value_that_does_not_convert_is_one_line_naming_it(
    run: Run, shop: merkle.Database, tmp_path: Path, name: str, text: str, expected: str
) -> None:
    """Before: a raw pyarrow message naming no row, field or value (or, for csv bytes,
    the text stored as bytes)."""
    shop.create_table("t", key="id", schema=SCHEMA).commit()
    (tmp_path / name).write_text(text)
    line = run.fails("load", "shop", "t", str(tmp_path / name))
    assert f"cannot read {tmp_path / name} as {name.split('.')[1]}: " in line
    assert expected in line
    assert "changed from" not in line
    assert "pyarrow" not in line.lower()


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("a.jsonl", '{"id": 1}\n{"id": \n', "row 2: JSON parse error: Invalid value."),
        ("a.jsonl", '{"id": 1, "v": 2}\n{"id": 2, "v": "x"}\n', "row 2: JSON parse error"),
        ("a.csv", "id,v\n1,2\n2,3,4\n", "row 2: CSV parse error: expected 2 columns, got 3"),
        ("a.csv", "id,v\n1,2\n2,x\n", "row 2, field 'v': value 'x' is not int64"),
    ],
)
def test_rows_are_counted_one_way(
    run: Run, shop: merkle.Database, tmp_path: Path, name: str, text: str, expected: str
) -> None:
    """Before: pyarrow's count from 0 within a block ("in row 1 (after row 0)") next to
    the load's own count from 1, and "row N, line M" next to "row N (line M)"."""
    (tmp_path / name).write_text(text)
    args = ("--column-types", "v:int64") if "x\n" in text and name.endswith("csv") else ()
    line = run.fails("load", "shop", "t", str(tmp_path / name), "--key", "id", *args)
    assert expected in line
    assert "in row" not in line
    assert "(line" not in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("table", "alter", "shop", "t", "--rename", "x"), "--rename 'x' is not OLD=NEW"),
        (("table", "create", "shop", "q", "--key", "a,,b"), "--key 'a,,b' has an empty field"),
        (("gc", "--dry-run", "--grace", "1h1h"), "gives the unit 'h' more than once"),
        (("gc", "--dry-run", "--keep-within", "1d2h1d"), "gives the unit 'd' more than once"),
    ],
)
def test_malformed_option_values_are_one_line_and_status_1(
    run: Run, shop: merkle.Database, args: tuple[str, ...], expected: str
) -> None:
    """Before: --rename and an empty --key name were click usage errors (status 2) where
    --add, --widen and load's --key are status 1; --grace 1h1h was taken as 2h."""
    shop.create_table("t", key="id").commit()
    assert expected in run.fails(*args)


def test_advice_names_the_command_not_a_python_call(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: "change the field (alter_schema) or declare it schema-free
    (alter_schema(table, free=['t']))", a Python call a command-line user cannot make."""
    shop.create_table("t", key="id", schema=SCHEMA).commit()
    path = tmp_path / "a.csv"
    path.write_text("id,t\n1,noon\n")
    line = run.fails("load", "shop", "t", str(path), "--column-types", "t:string")
    assert "(merkle table alter shop t --free t)" in line
    assert "alter_schema" not in line


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "or make it nullable (alter_schema(table, nullable=['q']))",
            "or make it nullable (merkle table alter shop t --nullable q)",
        ),
        (
            "widen the field (alter_schema(table, widen={'q': ...})), declare it schema-free "
            "(alter_schema(table, free=['q']); CLI: merkle table alter DB T --free q), or fix",
            "widen the field (merkle table alter shop t --widen q:TYPE), declare it "
            "schema-free (merkle table alter shop t --free q), or fix",
        ),
        ("history was trimmed); pass base= (a Database or a version of 'a')", "pass --base N"),
        (
            "its changes (or commit(rebase=False) to be told of any concurrent commit instead "
            "of replaying)",
            "its changes",
        ),
        ("read it as Arrow (to_arrow, to_batches, get_arrow), where", "leave the field out"),
    ],
)
def test_python_advice_is_restated_for_the_command_line(message: str, expected: str) -> None:
    from merkle.cli.advice import for_cli

    assert expected in for_cli(message, "shop", "t")
