"""``merkle load`` that a data engineer trusts (issue 11, point 7).

Each test reproduces one finding of the issue (named in its docstring: what
the load did before) and checks what it does now.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import merkle
from merkle.cli import sources

from .helpers import SCRIPT, Run, assert_one_error_line, process_env


def test_null_and_nan_keys_stay_keys(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: CSV keys `null` and `nan` became nulls, then the load failed."""
    path = tmp_path / "words.csv"
    path.write_text("word,n\nnull,1\nnan,2\nNA,3\nn/a,\n")
    run.ok("load", "shop", "w", str(path), "--key", "word", "--null-values", "null,nan,NA,n/a")
    got = conn.open_db("shop").get_records("w", ["null", "nan", "NA", "n/a"])
    assert got == {
        "null": {"word": "null", "n": 1},
        "nan": {"word": "nan", "n": 2},
        "NA": {"word": "NA", "n": 3},
        "n/a": {"word": "n/a"},
    }


def test_only_empty_cells_are_null_unless_told(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: NA, n/a and null became nulls in other columns without notice."""
    path = tmp_path / "a.csv"
    path.write_text("id,note,n\n1,NA,\n2,null,5\n3,,6\n")
    run.ok("load", "shop", "t", str(path), "--key", "id")
    got = conn.open_db("shop").get_records("t", [1, 2, 3])
    assert got == {
        1: {"id": 1, "note": "NA"},
        2: {"id": 2, "note": "null", "n": 5},
        3: {"id": 3, "n": 6},
    }
    path.write_text("id,note,n\n4,NA,NA\n")
    run.ok("load", "shop", "t", str(path), "--null-values", "NA")
    assert conn.open_db("shop").get_records("t", [4]) == {4: {"id": 4}}


def test_delimiter_and_column_types(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: no delimiter (TSV) and no column-type options."""
    tsv = tmp_path / "a.tsv"
    tsv.write_text("id\tamount\tcode\n1\t1.50\t007\n2\t2.25\t010\n")
    run.ok(
        "load",
        "shop",
        "t",
        str(tsv),
        "--key",
        "id",
        "--column-types",
        "id:int32,amount:decimal128(10,2),code:string",
    )
    db = conn.open_db("shop")
    schema = db.describe_table("t")["schema"]
    assert [str(f.type) for f in schema] == ["int32", "decimal128(10, 2)", "string"]
    assert db.get_records("t", [1])[1]["code"] == "007"
    semi = tmp_path / "b.csv"
    semi.write_text("id;amount\n3;3.75\n")
    run.ok("load", "shop", "t", str(semi), "--delimiter", ";")
    assert str(conn.open_db("shop").get_records("t", [3])[3]["amount"]) == "3.75"


def test_a_type_change_after_the_first_block_names_the_row_and_column(
    run: Run, shop: merkle.Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the error had no row number."""
    monkeypatch.setattr(sources, "BLOCK_SIZE", 1024)
    lines = ["id,v", *(f"{i},{i}" for i in range(2000)), "2000,oops", "2001,5"]
    path = tmp_path / "late.csv"
    path.write_text("\n".join(lines) + "\n")
    error = run.fails("load", "shop", "t", str(path), "--key", "id")
    assert "late.csv" in error
    assert "row 2001, field 'v': value 'oops' is not int64: write a whole number" in error


def test_duplicate_keys_are_an_error_or_counted(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: 5,127 rows read, 109 kept, "loaded 5,127 rows" printed."""
    path = tmp_path / "dups.csv"
    path.write_text("id,v\n1,a\n2,b\n1,c\n2,d\n3,e\n")
    error = run.fails("load", "shop", "t", str(path), "--key", "id")
    assert "row 3: key 1 was already read at" in error
    assert "--on-duplicate" in error
    assert "t" not in conn.open_db("shop").list_tables()  # nothing committed
    out = run.ok("load", "shop", "t", str(path), "--key", "id", "--on-duplicate", "first").stdout
    assert "loaded 3 rows" in out
    assert "2 rows repeated a key and were dropped (the first row of each key won)" in out
    assert [r["v"] for r in conn.open_db("shop").scan("t")] == ["a", "b", "e"]
    run.ok("load", "shop", "t", str(path), "--on-duplicate", "last")
    assert [r["v"] for r in conn.open_db("shop").scan("t")] == ["c", "d", "e"]


def test_repeated_key_is_a_composite_key(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: --key a --key b silently took the last."""
    path = tmp_path / "ev.csv"
    path.write_text("user,seq,v\nDE,1,a\nDE,2,b\nAT,1,c\n")
    run.ok("load", "shop", "e", str(path), "--key", "user", "--key", "seq")
    db = conn.open_db("shop")
    assert db.describe_table("e")["key"] == ["user", "seq"]
    assert db.get_records("e", [("DE", 2)]) == {("DE", 2): {"user": "DE", "seq": 2, "v": "b"}}
    run.ok("load", "shop", "f", str(path), "--key", "user,seq")
    assert conn.open_db("shop").describe_table("f")["key"] == ["user", "seq"]
    out = run.ok("scan", "shop", "e", "--from", '["DE"]', "-f", "jsonl").stdout
    assert [line for line in out.splitlines() if line] == [
        '{"user": "DE", "seq": 1, "v": "a"}',
        '{"user": "DE", "seq": 2, "v": "b"}',
    ]


@pytest.mark.parametrize(
    ("name", "content", "fragment"),
    [
        ("data.csv", "parquet", "looks like Parquet; pass --format parquet"),
        ("data.jsonl", "parquet", "looks like Parquet"),
        ("data.parquet", "csv", "not a Parquet file"),
        ("data.csv", "gzip", "looks like gzip-compressed"),
    ],
)
def test_a_file_whose_content_is_not_its_format_is_one_line(
    run: Run, shop: merkle.Database, tmp_path: Path, name: str, content: str, fragment: str
) -> None:
    path = tmp_path / name
    table = pa.table({"id": list(range(100)), "v": ["x" * 30] * 100})
    if content == "parquet":
        pq.write_table(table, path)
    elif content == "gzip":
        import gzip

        path.write_bytes(gzip.compress(b"id,v\n1,a\n"))
    else:
        path.write_text("id,v\n1,a\n")
    error = run.fails("load", "shop", "t", str(path), "--key", "id")
    assert fragment in error
    assert error.isprintable()


@pytest.mark.slow
def test_a_parquet_file_named_csv_fails_cleanly_40_times(tmp_path: Path) -> None:
    """Before: binary garbage, then a hang at exit in 5 of 22 runs, or an abort (rc 134).

    40 clean runs in a row had a chance of (17/22)**40, about 3e-5, with that defect.
    """
    lake = (tmp_path / "lake").as_uri()
    path = tmp_path / "data.csv"
    pq.write_table(pa.table({"id": list(range(5000)), "v": ["x" * 20] * 5000}), path)
    env = process_env(lake)
    command = [str(SCRIPT), "load", "shop", "t", str(path), "--key", "id"]
    subprocess.run([str(SCRIPT), "db", "create", "shop"], env=env, check=True, timeout=120)
    for attempt in range(40):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, (attempt, done.returncode, done.stderr)
        assert done.stdout == ""
        assert_one_error_line(done.stderr)
        assert "looks like Parquet" in done.stderr


def test_loading_the_same_file_again_says_nothing_changed(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    path = tmp_path / "a.csv"
    path.write_text("id,v\n1,a\n2,b\n")
    assert "(version 1)" in run.ok("load", "shop", "t", str(path), "--key", "id").stdout
    out = run.ok("load", "shop", "t", str(path)).stdout
    assert out == "no change: shop.t already holds these 2 rows (still version 1)\n"
    assert [e.version for e in conn.history("shop")] == [1, 0]
