"""CLI errors found by a probe: each test failed before its fix.

A JSON Lines value that does not convert to its field's type named neither row,
field nor key (pyarrow's "Failed to convert JSON to int64, couldn't parse:1.5"),
and ``true`` in an int64 field advised --column-types, as for an inferred
column; ``merkle import -`` said click's "File '-' does not exist" (status 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import merkle
from merkle.cli import readerrors, sources

from .helpers import Run

INT_MAX = 2**63 - 1


def _typed_table(run: Run) -> None:
    run.ok("table", "create", "shop", "t", "--key", "id", "--schema", "id:int64,n:int64,u:uint8")


def _jsonl(path: Path, rows: int, bad_row: int, field: str, value: Any) -> Path:
    """``rows`` good records, the one at ``bad_row`` (from 1) with ``field`` set to ``value``."""
    lines = []
    for i in range(1, rows + 1):
        record: dict[str, Any] = {"id": i * 10, "n": i, "u": 1}
        if i == bad_row:
            record[field] = value
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


CASES = [
    ("n", 1.5, f"value 1.5 is not int64: write a whole number from {-INT_MAX - 1} to {INT_MAX}"),
    ("n", 2**63, f"value {2**63} is not int64"),
    ("n", True, "value True is not int64"),
    ("n", "x", "value 'x' is not int64"),
    ("u", 256, "value 256 is not uint8: write a whole number from 0 to 255"),
    ("u", -1, "value -1 is not uint8: write a whole number from 0 to 255"),
]


@pytest.mark.parametrize(("field", "value", "said"), CASES)
def test_jsonl_value_names_its_row_field_key_and_value(
    run: Run,
    conn: merkle.Connection,
    shop: merkle.Database,
    tmp_path: Path,
    field: str,
    value: Any,
    said: str,
) -> None:
    _typed_table(run)
    path = _jsonl(tmp_path / "x.jsonl", 3000, 2999, field, value)
    line = run.fails("load", "shop", "t", str(path))
    assert f"row 2999, field {field!r}, key 29990: {said}" in line
    assert "--column-types" not in line
    assert conn.open_db("shop").describe()["tables"]["t"]["count"] == 0


@pytest.mark.parametrize(("field", "value", "said"), CASES)
def test_jsonl_value_in_a_later_block_names_its_row(
    run: Run,
    shop: merkle.Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    field: str,
    value: Any,
    said: str,
) -> None:
    """Rows count from the file's start when the value is in a block after the first
    (and blank lines are no rows)."""
    monkeypatch.setattr(sources, "BLOCK_SIZE", 2048)
    monkeypatch.setattr(readerrors, "BLOCK_SIZE", 2048, raising=False)
    _typed_table(run)
    path = _jsonl(tmp_path / "x.jsonl", 1000, 777, field, value)
    path.write_text("\n" + path.read_text().replace("\n", "\n\n", 100))
    line = run.fails("load", "shop", "t", str(path))
    assert f"row 777, field {field!r}, key 7770: {said}" in line


def test_jsonl_bool_in_a_typed_field_is_not_advised_column_types(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    """The table types the field: --column-types (for a column pyarrow inferred) is no way
    out, from a file or from stdin (which is not read again to find the value)."""
    _typed_table(run)
    path = tmp_path / "y.jsonl"
    path.write_text('{"id": 1, "n": 1}\n{"id": 2, "n": true}\n')
    line = run.fails("load", "shop", "t", str(path))
    assert "row 2, field 'n', key 2: value True is not int64" in line
    assert "--column-types" not in line
    piped = '{"id": 1, "n": true}\n'
    line = run.fails("load", "shop", "t", "-", "--format", "jsonl", input=piped)
    assert "field 'n' is read as int64: write a whole number" in line
    assert "--column-types" not in line
    # A column the table does not type, inferred from its first values, a number then
    # a boolean: no type reads both; a schema-free field keeps each.
    other = tmp_path / "z.jsonl"
    other.write_text('{"id": 1, "m": 1}\n{"id": 2, "m": true}\n')
    line = run.fails("load", "shop", "t", str(other))
    assert "--column-types" not in line
    assert "make 'm' a schema-free field of the table" in line


def test_import_from_dash_says_to_save_the_archive_first(run: Run, shop: merkle.Database) -> None:
    line = run.fails("import", "-", "--db", "copy", input=b"not read")
    assert "cannot import from standard input ('-')" in line
    assert "save it to a file first" in line
    assert "does not exist" not in line
