"""``merkle load``: CSV, JSON Lines and Parquet files into a table, in one commit."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import merkle
from merkle.cli import sources

from .helpers import Run

ROWS = [
    {"id": i, "name": f"n{i}", "score": i / 4, "flag": i % 2 == 0, "code": f"c{i:03d}"}
    for i in range(25)
]


def write_file(path: Path, fmt: str, rows: list[dict[str, Any]]) -> Path:
    table = pa.Table.from_pylist(rows)
    if fmt == "csv":
        pacsv.write_csv(table, path)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        pq.write_table(table, path)
    return path


@pytest.mark.parametrize(
    ("fmt", "ext"), [("csv", "csv"), ("jsonl", "jsonl"), ("parquet", "parquet")]
)
def test_load_creates_the_table_and_commits_once(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path, fmt: str, ext: str
) -> None:
    path = write_file(tmp_path / f"rows.{ext}", fmt, ROWS)
    out = run.ok("load", "shop", "people", str(path), "--key", "id", "--author", "ann").stdout
    assert out == "loaded 25 rows into shop.people (version 1)\n"
    db = conn.open_db("shop")
    assert list(db.scan("people")) == ROWS
    assert db.describe_table("people")["key_codec"] == "int"
    head = conn.history("shop")[0]
    assert (head.version, head.message, head.author) == (
        1,
        f"load 25 rows into people from rows.{ext}",
        "ann",
    )


def test_load_several_files_of_several_formats_in_one_commit(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    a = write_file(tmp_path / "a.csv", "csv", ROWS[:10])
    b = write_file(tmp_path / "b.jsonl", "jsonl", ROWS[10:20])
    c = write_file(tmp_path / "c.parquet", "parquet", ROWS[20:])
    run.ok("load", "shop", "people", str(a), str(b), str(c), "--key", "id", "-m", "import")
    assert [e.message for e in conn.history("shop")] == ["import", None]
    assert list(conn.open_db("shop").scan("people")) == ROWS


def test_load_into_an_existing_table_upserts(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    shop.create_table("people", key="id").write("people", ROWS).commit()
    changed = [{"id": 3, "name": "changed"}, {"id": 100, "name": "new"}]
    path = write_file(tmp_path / "more.jsonl", "jsonl", changed)
    out = run.ok("load", "shop", "people", str(path)).stdout  # no --key needed
    assert out == "loaded 2 rows into shop.people (version 2)\n"
    got = conn.open_db("shop").get_records("people", [3, 100, 4])
    assert got == {3: changed[0], 100: changed[1], 4: ROWS[4]}


def test_the_key_column_is_read_as_the_codec_type(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """In a str-keyed table, "007" stays "007" (pyarrow alone would read the int 7)."""
    csv_path = tmp_path / "codes.csv"
    csv_path.write_text("code,n\n007,1\n010,2\n")
    run.ok("load", "shop", "codes", str(csv_path), "--key", "code", "--key-codec", "str")
    jsonl_path = tmp_path / "codes.jsonl"
    jsonl_path.write_text('{"code": "008", "n": 3}\n')
    run.ok("load", "shop", "codes", str(jsonl_path))
    db = conn.open_db("shop")
    assert [r["code"] for r in db.scan("codes")] == ["007", "008", "010"]
    floats = tmp_path / "f.csv"
    floats.write_text("x\n1\n2.5\n")
    run.ok("load", "shop", "floats", str(floats), "--key", "x", "--key-codec", "float")
    assert [r["x"] for r in conn.open_db("shop").scan("floats")] == [1.0, 2.5]


def test_csv_values_types_and_empty_cells(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    path = tmp_path / "v.csv"
    path.write_text("id,when,note,n\n1,2026-01-31T12:00:00Z,hello,5\n2,2026-02-01T00:00:00Z,,\n")
    run.ok("load", "shop", "v", str(path), "--key", "id")
    got = list(conn.open_db("shop").scan("v"))
    assert got[0]["note"] == "hello"
    assert got[0]["n"] == 5
    assert got[0]["when"].isoformat() == "2026-01-31T12:00:00+00:00"
    assert got[1] == {"id": 2, "when": got[1]["when"]}  # empty cells are absent fields


def test_jsonl_nested_values_round_trip(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    rows = [{"id": "a", "tags": ["x", "y"], "doc": {"k": 1}}, {"id": "b", "n": 2}]
    run.ok(
        "load", "shop", "docs", str(write_file(tmp_path / "d.jsonl", "jsonl", rows)), "--key", "id"
    )
    assert list(conn.open_db("shop").scan("docs")) == rows


def test_compressed_files(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    plain = write_file(tmp_path / "rows.csv", "csv", ROWS)
    packed = tmp_path / "rows.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    run.ok("load", "shop", "people", str(packed), "--key", "id")
    assert list(conn.open_db("shop").scan("people")) == ROWS


def test_stdin(run: Run, conn: merkle.Connection, shop: merkle.Database) -> None:
    text = "".join(json.dumps(row) + "\n" for row in ROWS)
    out = run.ok("load", "shop", "people", "-", "--key", "id", "--format", "jsonl", input=text)
    assert out.stdout == "loaded 25 rows into shop.people (version 1)\n"
    assert conn.history("shop")[0].message == "load 25 rows into people from stdin"
    assert list(conn.open_db("shop").scan("people")) == ROWS


def test_many_batches_stream_into_one_commit(
    run: Run,
    conn: merkle.Connection,
    shop: merkle.Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows = [{"id": i, "v": "x" * (i % 17)} for i in range(3000)]
    path = write_file(tmp_path / "big.csv", "csv", rows)
    monkeypatch.setattr(sources, "BLOCK_SIZE", 2048)  # dozens of record batches
    batches: list[int] = []
    real_write = merkle.Database.write

    def counting_write(self: merkle.Database, table: str, records: Any) -> merkle.Database:
        assert isinstance(records, pa.RecordBatch)  # Arrow all the way, never Python rows
        batches.append(records.num_rows)
        return real_write(self, table, records)

    monkeypatch.setattr(merkle.Database, "write", counting_write)
    run.ok("load", "shop", "big", str(path), "--key", "id")
    assert len(batches) > 10
    assert sum(batches) == 3000
    assert [e.version for e in conn.history("shop")] == [1, 0]
    assert conn.open_db("shop").describe()["tables"]["big"]["count"] == 3000


def test_an_empty_file_commits_nothing(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    shop.create_table("people", key="id").commit()
    path = tmp_path / "empty.csv"
    path.write_text("id,name\n")
    out = run.ok("load", "shop", "people", str(path)).stdout
    assert out == "nothing to load into shop.people: the files hold no rows\n"
    assert conn.history("shop")[0].version == 1


@pytest.mark.parametrize(
    ("files", "args", "message"),
    [
        ({"a.csv": "id\n1\n"}, (), "table 'people' does not exist in database 'shop': pass --key"),
        ({"a.txt": "id\n1\n"}, ("--key", "id"), "cannot tell the format of"),
        ({"a.json": "[]"}, ("--key", "id"), "pass --format csv, jsonl or parquet"),
        ({"a.csv": "id,x\n1,2\n3\n"}, ("--key", "id"), "as csv: row 2: CSV parse error"),
        ({"a.jsonl": '{"id": 1}\n{"id": \n'}, ("--key", "id"), "as jsonl"),
        ({"a.parquet": "not parquet"}, ("--key", "id"), "as parquet"),
        ({"a.csv": "x\n1\n"}, ("--key", "id"), "has no column 'id'"),
        ({"a.csv": "id\n1\n"}, ("--key", "id", "--key-codec", "what"), "what"),
    ],
)
def test_load_errors(
    run: Run,
    shop: merkle.Database,
    tmp_path: Path,
    files: dict[str, str],
    args: tuple[str, ...],
    message: str,
) -> None:
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    line = run.fails("load", "shop", "people", *paths, *args)
    assert message in line


def test_load_errors_on_an_existing_table(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    shop.create_table("people", key="id", key_codec="int").commit()
    path = write_file(tmp_path / "a.csv", "csv", ROWS)
    assert "keyed by 'id', not 'name'" in run.fails(
        "load", "shop", "people", str(path), "--key", "name"
    )
    line = run.fails("load", "shop", "people", str(path), "--key-codec", "str")
    assert "exists with key codec int" in line
    assert "--format" in run.fails("load", "shop", "people", "-", input="id\n1\n")
    assert "stdin" in run.fails("load", "shop", "people", "-", "--format", "parquet", input="x")
    assert "no database 'nope'" in run.fails("load", "nope", "people", str(path), "--key", "id")
    assert conn.history("shop")[0].version == 1  # nothing was committed


def test_a_missing_file_is_a_usage_error(run: Run, shop: merkle.Database, tmp_path: Path) -> None:
    result = run("load", "shop", "people", str(tmp_path / "missing.csv"), "--key", "id")
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
