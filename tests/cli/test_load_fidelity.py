"""``merkle load`` stores what the files hold, or refuses: no value rounded, cut or made
Infinity, and a file loads the same whatever its size, encoding mark or emptiness."""

from __future__ import annotations

import datetime as dt
import decimal
import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import merkle
from merkle.cli import inferred, sources

from .helpers import Run


def _table(conn: merkle.Connection, schema: pa.Schema) -> None:
    conn.create_db("s").create_table("t", key="id", schema=schema).commit()


def _rows(conn: merkle.Connection) -> list[dict[str, object]]:
    return sorted(list(conn.open_db("s").scan("t")), key=lambda r: str(r["id"]))


# -- 1: a number beyond float32 is refused, never stored as Infinity --------------------


@pytest.mark.parametrize(
    ("name", "text", "shown"),
    [
        ("a.csv", "id,f\n1,2.5\n2,1e39\n", "'1e39'"),
        ("a.jsonl", '{"id": 1, "f": 2.5}\n{"id": 2, "f": -1e39}\n', "-1e+39"),
        ("b.csv", "id,f\n1,2.5\n2,-3.5e38\n", "'-3.5e38'"),
    ],
)
def test_float32_overflow_is_refused(
    run: Run, conn: merkle.Connection, tmp_path: Path, name: str, text: str, shown: str
) -> None:
    _table(conn, pa.schema([("id", pa.int64()), ("f", pa.float32())]))
    path = tmp_path / name
    path.write_text(text)
    line = run.fails("load", "s", "t", str(path))
    assert f"row 2, field 'f', key 2: value {shown} is beyond the range of float32" in line
    assert _rows(conn) == []
    # the infinities themselves, and numbers in range (blanks around them too), still load
    if name.endswith(".csv"):
        path.write_text("id,f\n1,inf\n2,-Infinity\n3,0.5\n4, 1.5\n")
    else:
        path.write_text(
            '{"id": 1, "f": "Infinity"}\n{"id": 2, "f": "-Infinity"}\n'
            '{"id": 3, "f": 0.5}\n{"id": 4, "f": 1.5}\n'
        )
    run.ok("load", "s", "t", str(path))
    assert [r["f"] for r in _rows(conn)] == [float("inf"), float("-inf"), 0.5, 1.5]


# -- 2: a Parquet value the field does not hold exactly is refused -----------------------


@pytest.mark.parametrize(
    ("column", "field", "said"),
    [
        (
            pa.array([0.5, 0.1], pa.float64()),
            pa.float32(),
            "value 0.1 is not float (float32 holds it only as 0.10000000149011612)",
        ),
        (
            pa.array(
                [dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 2, 12, 34)], pa.timestamp("us")
            ),
            pa.date32(),
            "(it has a time of day, which a date drops)",
        ),
        (
            pa.array([1.25, 0.1], pa.float64()),
            pa.decimal128(10, 2),
            "value 0.1 is not decimal128(10, 2)",
        ),
    ],
)
def test_parquet_value_that_would_be_rounded_is_refused(
    run: Run,
    conn: merkle.Connection,
    tmp_path: Path,
    column: pa.Array,
    field: pa.DataType,
    said: str,
) -> None:
    _table(conn, pa.schema([("id", pa.int64()), ("v", field)]))
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"id": [1, 2], "v": column}), path)
    line = run.fails("load", "s", "t", str(path))
    assert "row 2, field 'v', key 2: " in line
    assert said in line
    assert _rows(conn) == []
    # the first row alone, which the field holds exactly, loads as it is
    pq.write_table(pa.table({"id": [1], "v": column.slice(0, 1)}), path)
    run.ok("load", "s", "t", str(path))
    assert [r["v"] for r in _rows(conn)] == column.slice(0, 1).cast(field).to_pylist()


# -- 4: an empty JSON Lines file (an empty table's export) loads nothing -----------------


@pytest.mark.parametrize("text", ["", "\n\n", "\ufeff"])
@pytest.mark.parametrize("stdin", [False, True])
def test_empty_jsonl_loads_nothing(
    run: Run, conn: merkle.Connection, tmp_path: Path, text: str, stdin: bool
) -> None:
    _table(conn, pa.schema([("id", pa.int64())]))
    path = tmp_path / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    if stdin:
        result = run.ok("load", "s", "t", "-", "--format", "jsonl", input=path.read_bytes())
    else:
        result = run.ok("load", "s", "t", str(path))
    assert "nothing to load" in result.output


# -- 5: CSV of decimal32, decimal64 and decimal256 fields loads back ---------------------


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        (pa.decimal256(50, 10), "1234567890123456789012345678901234567890.5"),
        (pa.decimal64(12, 2), "1234567.25"),
        (pa.decimal32(5, 2), "123.25"),
    ],
)
def test_csv_round_trip_of_wide_and_narrow_decimals(
    run: Run, conn: merkle.Connection, tmp_path: Path, kind: pa.DataType, value: str
) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", kind)])
    conn.create_db("s").create_table("t", key="id", schema=schema).write(
        "t", pa.table({"id": [1], "x": [decimal.Decimal(value)]}, schema=schema)
    ).commit()
    path = tmp_path / "t.csv"
    path.write_text(run.ok("scan", "s", "t", "-f", "csv").output)
    assert "already holds these 1 rows" in run.ok("load", "s", "t", str(path)).output
    # and into a new table, the type given on the command line
    new = run.ok("load", "s", "u", str(path), "--key", "id", "--column-types", f"x:{kind}")
    assert "loaded 1 rows" in new.output
    assert list(conn.open_db("s").scan("u")) == [{"id": 1, "x": decimal.Decimal(value)}]


def test_csv_decimal_with_more_places_than_the_scale_is_refused(
    run: Run, conn: merkle.Connection, tmp_path: Path
) -> None:
    _table(conn, pa.schema([("id", pa.int64()), ("x", pa.decimal64(12, 2))]))
    path = tmp_path / "t.csv"
    path.write_text("id,x\n1,1.5\n2,1.234\n")
    line = run.fails("load", "s", "t", str(path))
    assert "row 2, field 'x', key 2: value '1.234'" in line


# -- 7: a type inferred from the first block that a later row does not fit ---------------


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "BLOCK_SIZE", 1 << 10)
    monkeypatch.setattr(inferred, "BLOCK_SIZE", 1 << 10)


@pytest.mark.usefixtures("small_blocks")
def test_later_csv_float_names_the_column_types_fix(run: Run, tmp_path: Path) -> None:
    run.ok("db", "create", "s")
    path = tmp_path / "big.csv"
    path.write_text("id,v\n" + "".join(f"{i},{i}\n" for i in range(400)) + "400,2.5\n")
    line = run.fails("load", "s", "t", str(path), "--key", "id")
    assert "row 401, field 'v'" in line
    assert "--column-types v:float64" in line
    run.ok("load", "s", "t", str(path), "--key", "id", "--column-types", "v:float64")


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize(
    ("last", "said"),
    [
        (
            {"id": 300, "o": {"a": 1, "b": "new"}},
            "row 301: field 'o.b' does not fit column 'o', read as struct<a: int64>",
        ),
        (
            {"id": 300, "o": {"a": 2.5}},
            "row 301: field 'o.a' does not fit column 'o', read as struct<a: int64>",
        ),
    ],
)
def test_later_jsonl_member_names_row_field_and_fix(
    run: Run, tmp_path: Path, last: dict[str, object], said: str
) -> None:
    run.ok("db", "create", "s")
    path = tmp_path / "big.jsonl"
    lines = [json.dumps({"id": i, "o": {"a": i}}) for i in range(300)]
    path.write_text("\n".join([*lines, json.dumps(last)]) + "\n")
    line = run.fails("load", "s", "t", str(path), "--key", "id")
    assert said in line, line
    fix = line.split("--column-types '")[1].split("'")[0]
    run.ok("load", "s", "t", str(path), "--key", "id", "--column-types", fix)


# -- 8: a UTF-8 byte order mark on JSON Lines ---------------------------------------------


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_jsonl_with_byte_order_mark_loads(
    run: Run, conn: merkle.Connection, tmp_path: Path, suffix: str
) -> None:
    data = '\ufeff{"id": 1, "v": "a"}\n{"id": 2, "v": "b"}\n'.encode()
    path = tmp_path / f"a.jsonl{suffix}"
    path.write_bytes(gzip.compress(data) if suffix else data)
    run.ok("db", "create", "s2")
    run.ok("load", "s2", "t", str(path), "--key", "id")
    # stdin, which was read right before, still is
    run.ok("load", "s2", "t", "-", "--format", "jsonl", input=data)
    assert list(conn.open_db("s2").scan("t")) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "b"},
    ]


# -- 9: timestamp keys with and without a zone --------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        (
            "k.csv",
            "k,v\n2026-01-01T00:00:00,a\n2026-01-02T00:00:00Z,b\n2026-01-03T02:00:00+02:00,c\n",
        ),
        ("d.csv", "k,v\n2026-01-01,a\n2026-01-02T00:00:00Z,b\n2026-01-03 00:00:00,c\n"),
    ],
)
def test_timestamp_keys_mixing_zones_load_as_utc(
    run: Run, conn: merkle.Connection, tmp_path: Path, name: str, text: str
) -> None:
    run.ok("db", "create", "s")
    path = tmp_path / name
    path.write_text(text)
    run.ok("load", "s", "t", str(path), "--key", "k", "--key-codec", "timestamp")
    utc = dt.UTC
    keys = [r["k"] for r in conn.open_db("s").scan("t")]
    assert [k.astimezone(utc).replace(tzinfo=None) for k in keys] == [
        dt.datetime(2026, 1, d) for d in (1, 2, 3)
    ]
    got = run.ok("get", "s", "t", "2026-01-03T00:00:00").output
    assert '"v": "c"' in got
