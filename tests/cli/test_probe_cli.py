"""CLI defects found by an adversarial probe: each test failed before its fix.

CSV null values in binary and large_string columns, map keys that render
alike, negative int keys given to ``get``, struct types in ``--widen`` and
``--column-types``, a Parquet value that does not fit a typed field, and a
missing S3 bucket hidden behind "no merkle lake".
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import new_bucket

import merkle
from merkle.cli.common import CliError
from merkle.cli.output import cell, jsonable
from merkle.cli.sources import parse_type, parse_types

from .helpers import Run


def _rows(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# -- 1. CSV null values in every text column ---------------------------------------


def test_csv_nulls_apply_to_binary_and_large_columns(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    data = tmp_path / "nb.csv"
    data.write_text("id,b,s,ls,lb\n1,,,,\n2,NA,NA,NA,NA\n3,x,y,z,w\n")
    run.ok(
        "load", "shop", "t", str(data), "--key", "id", "--null-values", "NA",
        "--column-types", "b:binary,s:string,ls:large_string,lb:large_binary",
    )  # fmt: skip
    rows = conn.open_db("shop").to_arrow("t").to_pylist()
    for row in rows[:2]:
        assert row == {"id": row["id"], "b": None, "s": None, "ls": None, "lb": None}
    assert rows[2] == {"id": 3, "b": b"x", "s": "y", "ls": "z", "lb": b"w"}


def test_csv_nulls_in_an_existing_binary_field(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    shop.create_table(
        "t", key="id", schema=pa.schema([("id", pa.int64()), ("b", pa.binary())])
    ).commit()
    data = tmp_path / "nb.csv"
    data.write_text("id,b\n1,\n2,NA\n3,78\n")  # bytes in hex, as `scan -f csv` writes them
    run.ok("load", "shop", "t", str(data), "--null-values", "NA")
    stored = conn.open_db("shop").to_arrow("t").column("b").to_pylist()
    assert stored == [None, None, b"x"]


# -- 2. map keys with the same text --------------------------------------------------


def test_map_keys_with_the_same_text_are_all_shown(run: Run, shop: merkle.Database) -> None:
    shop.create_table("t", key="id", schema_free=True).write(
        "t",
        [
            {"id": 1, "m": {1: "int-one", "1": "str-one"}},
            {"id": 2, "m": {b"\x01": "bytes", "01": "text"}},
            {"id": 3, "m": {1: "only"}},
        ],
    ).commit()
    for fmt in ("jsonl", "json", "csv", "table"):
        out = run.ok("scan", "shop", "t", "-f", fmt).stdout
        for value in ("int-one", "str-one", "bytes", "text"):
            assert value in out, (fmt, out)
    rows = _rows(run.ok("scan", "shop", "t", "-f", "jsonl").stdout)
    assert rows[0]["m"] == [[1, "int-one"], ["1", "str-one"]]
    assert rows[1]["m"] == [["01", "bytes"], ["01", "text"]]
    assert rows[2]["m"] == {"1": "only"}  # keys that do not collide stay an object


def test_jsonable_map_with_colliding_keys() -> None:
    assert jsonable({1: "a", "1": "b"}) == [[1, "a"], ["1", "b"]]
    assert jsonable({None: 1, "": 2}) == [[None, 1], ["", 2]]
    assert jsonable({"a": 1, 2: b"\x03"}) == {"a": 1, "2": "03"}
    assert cell({1: "a", "1": "b"}) == '[[1,"a"],["1","b"]]'


# -- 3. negative keys ----------------------------------------------------------------


@pytest.fixture
def negatives(shop: merkle.Database) -> merkle.Database:
    """Table ``t`` of ``shop``, int keys -7 and 3; ``f``, float keys -2.5, -inf and 1e3."""
    shop = shop.create_table("t", key="id", key_codec="int")
    shop = shop.write("t", [{"id": -7, "v": "neg"}, {"id": 3, "v": "pos"}])
    shop = shop.create_table("f", key="k", key_codec="float")
    shop = shop.write("f", [{"k": -2.5}, {"k": float("-inf")}, {"k": 1e3}, {"k": -1000.0}])
    return shop.commit()


def test_get_takes_negative_keys(run: Run, negatives: merkle.Database) -> None:
    assert _rows(run.ok("get", "shop", "t", "-7", "-f", "jsonl").stdout) == [{"id": -7, "v": "neg"}]
    out = run.ok("get", "shop", "t", "3", "--format", "jsonl", "-7", "--fields", "v").stdout
    assert [row["id"] for row in _rows(out)] == [3, -7]
    out = run.ok("get", "shop", "f", "-2.5", "-inf", "-1e3", "-fjsonl").stdout
    assert [row["k"] for row in _rows(out)] == [-2.5, "-Infinity", -1000.0]
    assert _rows(run.ok("get", "shop", "t", "-f", "jsonl", "--", "-7").stdout)[0]["id"] == -7


def test_get_still_refuses_unknown_options(run: Run, negatives: merkle.Database) -> None:
    for typo in (("-7", "--feilds", "v"), ("-x",), ("3", "-7", "--limit", "1")):
        result = run("get", "shop", "t", *typo)
        assert result.exit_code == 2, result.output
        assert "No such option" in result.stderr
    result = run("get", "shop", "t", "-7", "--version", "-1")  # an option's value stays one
    assert result.exit_code == 2, result.output
    assert "--version" in result.stderr


# -- 4. struct types on the command line ---------------------------------------------


def test_type_lists_split_on_top_level_commas_only() -> None:
    struct = pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])
    assert parse_types("o:struct<a:int64,b:list<string>>,n:int8") == {
        "o": struct,
        "n": pa.int8(),
    }
    for kind in (
        struct,
        pa.large_list(pa.struct([("x", pa.float64())])),
        pa.map_(pa.string(), pa.list_(pa.int64())),
        pa.decimal128(10, 2),
        pa.timestamp("us", tz="UTC"),
    ):
        assert parse_types(f"o:{kind},z:int8") == {"o": kind, "z": pa.int8()}  # as printed


# (``struct<>`` is no error: Arrow prints the empty struct so, and a table stores it)
@pytest.mark.parametrize("text", ["struct<a:int64", "struct<a:nope>", "map<int8>"])
def test_bad_nested_types_are_clear_errors(text: str) -> None:
    with pytest.raises(CliError, match="unknown type"):
        parse_type(text)


def test_table_alter_parses_a_struct_type(
    run: Run, conn: merkle.Connection, shop: merkle.Database
) -> None:
    shop.create_table("t", key="id").write("t", [{"id": 1, "o": {"a": 1}}]).commit()
    run.ok("table", "alter", "shop", "t", "--add", "p:struct<a:int64,b:string>")
    schema = conn.open_db("shop").describe_table("t")["schema"]
    assert schema.field("p").type == pa.struct([("a", pa.int64()), ("b", pa.string())])
    # Widening a struct is the API's to refuse, with its own message (not a parse error).
    line = run.fails("table", "alter", "shop", "t", "--widen", "o:struct<a:int64,b:string>")
    assert "unknown type" not in line
    assert "cannot widen field 'o'" in line


# -- 5. a Parquet value that does not fit a typed field ------------------------------


def test_parquet_value_that_does_not_fit_names_row_field_key_value(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(
        pa.table({"id": pa.array([1], pa.int64()), "small": pa.array([1], pa.uint8())}), first
    )
    pq.write_table(
        pa.table({"id": [2, 3, 4], "small": pa.array([5, 300, 400], pa.int64())}), second
    )
    run.ok("load", "shop", "t", str(first), "--key", "id")
    line = run.fails("load", "shop", "t", str(second))
    assert line == (
        f"error: cannot read {second} as parquet: row 2, field 'small', key 3: "
        "value 300 is not uint8 (Integer value 300 not in range: 0 to 255)"
    )


def test_parquet_column_that_cannot_be_cast_names_it(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    data = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": [1], "o": [{"a": 1}]}), data)
    line = run.fails("load", "shop", "t", str(data), "--key", "id", "--column-types", "o:int64")
    assert "column 'o' is struct<a: int64> in the file and cannot be read as int64" in line


# -- 6. a missing S3 bucket ----------------------------------------------------------


@pytest.mark.s3
def test_a_missing_bucket_is_named(moto_endpoint: str) -> None:
    run = Run("s3://no-such-bucket-merkle/lake")
    options = ("-o", f"endpoint_url={moto_endpoint}", "-o", "region_name=us-east-1")
    line = run.fails(*options, "db", "list")
    assert "S3 bucket 'no-such-bucket-merkle' does not exist" in line
    assert "aws s3 mb" in line
    # A bucket that exists but holds no lake is still "no merkle lake".
    empty = Run(f"s3://{new_bucket(moto_endpoint)}/lake")
    assert "there is no merkle lake at" in empty.fails(*options, "db", "list")


# -- an empty string through the CLI's own CSV export and load --------------------------


def test_csv_export_of_an_empty_string_loads_back_as_one(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """``scan -f csv`` writes an empty string as a quoted ``""`` (a null as an empty
    cell); ``load`` took both for no value, so the empty string was lost."""
    schema = pa.schema([("k", pa.string()), ("s", pa.string()), ("n", pa.string())])
    shop = shop.create_table("t", key="k", schema=schema)
    shop.write("t", [{"k": "a", "s": "", "n": "NA"}, {"k": "b"}]).commit()
    exported = tmp_path / "t.csv"
    exported.write_text(run.ok("scan", "shop", "t", "-f", "csv").output)
    run.ok("load", "shop", "t2", str(exported), "--key", "k")
    db = conn.open_db("shop")
    assert db.to_arrow("t2").to_pylist() == db.to_arrow("t").to_pylist()
    assert db.get_records("t2", ["a", "b"]) == {
        "a": {"k": "a", "s": "", "n": "NA"},
        "b": {"k": "b"},
    }
