"""``merkle load`` of a ``merkle scan -f jsonl`` export of a table with schema-free fields.

A schema-free field holds values of any kind; its JSON Lines values are read
as the JSON holds them (not by pyarrow's inference, which cannot read a list
of a number and a string, makes an absent member of an object null and a
number beyond int64 a float), so the export loads back as the records it
came from. A column whose values change kind gets advice that works: make
the field schema-free, never a ``--column-types`` no type satisfies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import merkle
from merkle.cli import sources

from .helpers import Run

FREE = [
    {"k": 1, "m": [1, "a"]},
    {"k": 2, "m": {"x": 1}},
    {"k": 3, "m": {"y": [None, {"z": "deep"}], "x": None}},
    {"k": 4, "m": 2**70},
    {"k": 5, "m": -(2**64)},
    {"k": 6, "m": 1.0},
    {"k": 7, "m": 1},
    {"k": 8, "m": "12"},
    {"k": 9, "m": "1.5"},
    {"k": 10, "m": "true"},
    {"k": 11, "m": True},
    {"k": 12, "m": []},
    {"k": 13, "m": {}},
    {"k": 14},
    {"k": 15, "m": [[1, 2.5], {"a": [True, None]}, "x"]},
    {"k": 16, "m": 0.1},
]


def _typed(value: Any) -> Any:
    """``value`` with the Python type of every number and member, so that 1 and 1.0
    (and True) differ in a comparison."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def _records(conn: merkle.Connection, table: str) -> list[Any]:
    return _typed(list(conn.open_db("shop").scan(table)))


def _export(run: Run, tmp_path: Path, table: str, name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(run.ok("scan", "shop", table, "-f", "jsonl").stdout)
    return path


@pytest.fixture
def free_table(shop: merkle.Database) -> merkle.Database:
    """``shop.t`` keyed by ``k``, ``m`` schema-free, holding :data:`FREE`."""
    return shop.create_table("t", key="k", schema_free=["m"]).write("t", FREE).commit()


def test_a_jsonl_export_of_a_schema_free_field_loads_back_unchanged(
    run: Run, conn: merkle.Connection, free_table: merkle.Database, tmp_path: Path
) -> None:
    path = _export(run, tmp_path, "t")
    out = run.ok("load", "shop", "t", str(path)).stdout
    assert out == f"no change: shop.t already holds these {len(FREE)} rows (still version 1)\n"


def test_a_type_given_to_a_schema_free_field_is_not_needed(
    run: Run, conn: merkle.Connection, free_table: merkle.Database, tmp_path: Path
) -> None:
    path = _export(run, tmp_path, "t")
    out = run.ok("load", "shop", "t", str(path), "--column-types", "m:string").stdout
    assert out.startswith("no change: shop.t already holds these")


def test_the_export_loads_into_a_new_table_with_the_field_schema_free(
    run: Run, conn: merkle.Connection, free_table: merkle.Database, tmp_path: Path
) -> None:
    path = _export(run, tmp_path, "t")
    run.ok("table", "create", "shop", "u", "--key", "k", "--schema-free", "m")
    assert run.ok("load", "shop", "u", str(path)).stdout.startswith("loaded 16 rows into shop.u")
    assert _records(conn, "u") == _records(conn, "t") == _typed(FREE)


def test_schema_free_values_beside_typed_and_rendered_fields(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    rows = [
        {"k": i, "b": bytes([i]), "n": i * 2, "m": FREE[i % len(FREE)].get("m")} for i in range(40)
    ]
    shop.create_table("t", key="k", schema_free=["m"]).write("t", rows).commit()
    path = _export(run, tmp_path, "t")
    assert run.ok("load", "shop", "t", str(path)).stdout.startswith("no change:")
    run.ok("table", "create", "shop", "u", "--key", "k", "--schema-free", "m")
    run.ok("table", "alter", "shop", "u", "--add", "b:binary", "--add", "n:int64")
    run.ok("load", "shop", "u", str(path))
    assert _records(conn, "u") == _records(conn, "t")


def test_blocks_whose_schema_free_values_differ_in_kind(
    run: Run,
    conn: merkle.Connection,
    shop: merkle.Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first blocks hold numbers, later ones strings, lists and objects: each block
    keeps its own values (no type learned from the first block applies to the field)."""
    monkeypatch.setattr(sources, "BLOCK_SIZE", 1 << 10)
    rows: list[dict[str, Any]] = [{"k": i, "m": i} for i in range(200)]
    rows += [{**FREE[i % len(FREE)], "k": 200 + i} for i in range(200)]
    shop.create_table("t", key="k", schema_free=["m"]).write("t", rows).commit()
    path = _export(run, tmp_path, "t")
    assert run.ok("load", "shop", "t", str(path)).stdout.startswith("no change: shop.t")
    run.ok("table", "create", "shop", "u", "--key", "k", "--schema-free", "m")
    run.ok("load", "shop", "u", str(path))
    assert _records(conn, "u") == _typed(rows)


def test_from_stdin(
    run: Run, conn: merkle.Connection, free_table: merkle.Database, tmp_path: Path
) -> None:
    text = _export(run, tmp_path, "t").read_text()
    out = run.ok("load", "shop", "t", "-", "--format", "jsonl", input=text).stdout
    assert out.startswith("no change: shop.t already holds these")


def test_a_number_beyond_float64_in_a_schema_free_field_is_refused(
    run: Run, free_table: merkle.Database, tmp_path: Path
) -> None:
    path = tmp_path / "big.jsonl"
    path.write_text('{"k": 1, "m": [1, "a"]}\n{"k": 2, "m": {"x": [1e400]}}\n')
    error = run.fails("load", "shop", "t", str(path))
    assert "row 2, field 'm.x', key 2: value 1e400 is beyond the range of float64" in error


def test_advice_for_a_new_table_makes_the_field_schema_free_and_works(
    run: Run, conn: merkle.Connection, free_table: merkle.Database, tmp_path: Path
) -> None:
    path = _export(run, tmp_path, "t")
    error = run.fails("load", "shop", "n", str(path), "--key", "k")
    assert "changed from number to string" in error
    assert "--column-types" not in error
    command = "merkle table create shop n --key k --schema-free m"
    assert command in error
    run.ok(*command.split()[1:])
    run.ok("load", "shop", "n", str(path))
    assert _records(conn, "n") == _typed(FREE)


def test_advice_for_an_existing_table_without_the_field_works(
    run: Run, conn: merkle.Connection, free_table: merkle.Database, tmp_path: Path
) -> None:
    path = _export(run, tmp_path, "t")
    run.ok("table", "create", "shop", "e", "--key", "k")
    error = run.fails("load", "shop", "e", str(path))
    assert "--column-types" not in error
    first = "merkle table alter shop e --add m:string"
    second = "merkle table alter shop e --free m"
    assert f"({first}, then {second})" in error
    run.ok(*first.split()[1:])
    run.ok(*second.split()[1:])
    run.ok("load", "shop", "e", str(path))
    assert _records(conn, "e") == _typed(FREE)


def test_advice_for_top_level_values_of_different_kinds(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    """A number then a string: no --column-types reads both (pyarrow converts neither to
    the other), so the advice is a schema-free field; float64 only for "NaN" text."""
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"k": 1, "m": 1}\n{"k": 2, "m": "a"}\n')
    error = run.fails("load", "shop", "n", str(path), "--key", "k")
    assert "m:string" not in error
    assert "merkle table create shop n --key k --schema-free m" in error
    assert 'for numbers written with "NaN" or "Infinity" pass --column-types m:float64' in error
