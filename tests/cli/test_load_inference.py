"""``merkle load`` refuses the types pyarrow infers that would store values wrongly.

Each test reproduces one finding of an adversarial test of the command line
(named in its docstring: what the load did before) and checks what it does now.
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import merkle

from .helpers import Run


def _latin1_people(path: Path, rows: int = 400) -> Path:
    lines = ["id,name,city"] + [f"{i},person{i},Berlin" for i in range(1, rows)]
    lines.append(f"{rows},Jos\xe9,M\xfcnchen")
    path.write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    return path


def test_a_latin1_csv_is_refused_naming_the_column_row_and_byte(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: loaded, with every text column stored as binary (hex on output)."""
    path = _latin1_people(tmp_path / "people.csv")  # the bad bytes past the first 4 KiB
    error = run.fails("load", "shop", "people", str(path), "--key", "id")
    assert "column 'name' is not UTF-8 text" in error
    assert "(row 400: byte 0xe9 at offset 3" in error
    assert "re-encode the file as UTF-8" in error
    assert "--column-types name:binary" in error
    assert "people" not in conn.open_db("shop").list_tables()  # nothing committed


def test_a_short_file_with_a_bad_last_byte_is_refused(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: check_content excused a bad byte in the last 4 bytes of its window even
    when the window held the whole file, and the column was stored as binary."""
    path = tmp_path / "short.csv"
    path.write_bytes(b"id,name\n1,caf\xe9\n")
    error = run.fails("load", "shop", "short", str(path), "--key", "id")
    assert "column 'name' is not UTF-8 text (row 1: byte 0xe9" in error
    short_jsonl = tmp_path / "short.jsonl"
    short_jsonl.write_bytes(b'{"id": 1, "name": "caf\xe9"}')
    error = run.fails("load", "shop", "short", str(short_jsonl), "--key", "id")
    assert "is not UTF-8 text, as JSON Lines must be: row 1 holds byte 0xe9" in error
    assert "short" not in conn.open_db("shop").list_tables()


def test_columns_declared_binary_may_hold_any_bytes(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    path = _latin1_people(tmp_path / "people.csv", rows=3)
    error = run.fails(
        "load", "shop", "p", str(path), "--key", "id", "--column-types", "name:binary"
    )
    assert "column 'city' is not UTF-8 text" in error  # the other column is still named
    types = "name:binary,city:binary"
    run.ok("load", "shop", "p", str(path), "--key", "id", "--column-types", types)
    db = conn.open_db("shop")
    assert db.get_records("p", [3])[3] == {"id": 3, "name": b"Jos\xe9", "city": b"M\xfcnchen"}
    # A table's binary fields are read as hex, as `merkle scan` writes them: the raw
    # bytes again need the option, which the error names.
    again = tmp_path / "again.csv"
    again.write_bytes(b"id,name,city\n4,Ren\xe9,K\xf6ln\n")
    error = run.fails("load", "shop", "p", str(again))
    assert "row 1, field 'name': byte 0xe9" in error
    assert "pass --column-types name:binary to store the cells' bytes as they are" in error
    run.ok("load", "shop", "p", str(again), "--column-types", types)
    assert conn.open_db("shop").get_records("p", [4])[4]["city"] == b"K\xf6ln"


def test_a_bad_byte_after_the_first_block_is_located(
    run: Run, shop: merkle.Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A column inferred as text from the first block, not UTF-8 in a later one."""
    from merkle.cli import sources

    monkeypatch.setattr(sources, "BLOCK_SIZE", 1 << 10)
    lines = ["id,name"] + [f"{i},name{i}" for i in range(1, 300)] + ["300,Jos\xe9"]
    path = tmp_path / "late.csv"
    path.write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    error = run.fails("load", "shop", "late", str(path), "--key", "id")
    assert "row 300, field 'name': byte 0xe9 at offset 3" in error
    assert "re-encode the file as UTF-8" in error


def test_a_column_name_that_is_not_utf8_is_one_line(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: a UnicodeDecodeError traceback."""
    path = tmp_path / "head.csv"
    path.write_bytes(b"id,na\xefve\n1,a\n")
    assert "a column name is not UTF-8 (byte 0xef)" in run.fails(
        "load", "shop", "t", str(path), "--key", "id"
    )


BIG_CSV = "id,n\n1,9223372036854775807\n2,9223372036854775808\n3,12345678901234567\n"
BIG_JSONL = (
    '{"id":1,"n":9223372036854775807}\n'
    '{"id":2,"n":18446744073709551615}\n'
    '{"id":3,"n":12345678901234567}\n'
)


@pytest.mark.parametrize(("ext", "text"), [("csv", BIG_CSV), ("jsonl", BIG_JSONL)])
def test_integers_beyond_int64_are_refused_not_rounded(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path, ext: str, text: str
) -> None:
    """Before: the column became float64: 12345678901234567 was stored as 1.2345678901234568e16."""
    path = tmp_path / f"big.{ext}"
    path.write_text(text)
    error = run.fails("load", "shop", "big", str(path), "--key", "id")
    assert "column 'n' holds integers beyond int64 (such as " in error
    assert "--column-types n:decimal128(38,0)" in error
    assert "big" not in conn.open_db("shop").list_tables()
    # From stdin too (its first block is kept, since it cannot be read twice).
    error = run.fails("load", "shop", "big", "-", "--format", ext, "--key", "id", input=text)
    assert "cannot read stdin as " in error
    assert "column 'n' holds integers" in error
    # The types the message suggests keep every digit; an explicit float64 is allowed.
    run.ok("load", "shop", "big", str(path), "--key", "id", "--column-types", "n:decimal128(38,0)")
    got = conn.open_db("shop").get_records("big", [3])[3]["n"]
    assert got == Decimal(12345678901234567)
    run.ok("load", "shop", "f", str(path), "--key", "id", "--column-types", "n:float64")
    assert conn.open_db("shop").get_records("f", [3])[3]["n"] == 1.2345678901234568e16


def test_big_integer_keys_do_not_collapse(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: two distinct keys became one float key (the second overwrote the first)."""
    path = tmp_path / "keys.csv"
    path.write_text("id,v\n18446744073709551614,a\n18446744073709551615,b\n")
    assert "column 'id' holds integers beyond int64" in run.fails(
        "load", "shop", "k", str(path), "--key", "id"
    )
    run.ok("load", "shop", "k", str(path), "--key", "id", "--column-types", "id:string")
    assert [r["v"] for r in conn.open_db("shop").scan("k")] == ["a", "b"]


@pytest.mark.parametrize(
    ("ext", "text"),
    [
        ("csv", "id,n\n1,1e19\n2,3\n"),  # a float literal: float data, however large
        ("csv", "id,n\n1,9223372036854775808\n2,2.5\n"),  # float data with a big integer
        ("csv", "id,n\n1,1.0\n2,2.0\n"),
        ("jsonl", '{"id": 1, "n": 1e19}\n{"id": 2, "n": 3}\n'),
        ("jsonl", '{"id": 1, "n": 1.0}\n{"id": 2, "n": 2.0}\n'),
    ],
)
def test_float_data_is_still_read_as_float(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path, ext: str, text: str
) -> None:
    path = tmp_path / f"f.{ext}"
    path.write_text(text)
    run.ok("load", "shop", "f", str(path), "--key", "id")
    assert conn.open_db("shop").describe_table("f")["schema"].field("n").type == pa.float64()


def test_one_load_of_several_files_reads_each_with_the_types_so_far(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: the second file was read with inferred types (`007` as int64), and the
    load failed, where two loads of the same files succeed."""
    (tmp_path / "g1.csv").write_text("id,code\n1,abc\n")
    (tmp_path / "g2.csv").write_text("id,code\n2,007\n")
    (tmp_path / "g3.jsonl").write_text(json.dumps({"id": 3, "code": "x"}) + "\n")
    files = [str(tmp_path / name) for name in ("g1.csv", "g2.csv", "g3.jsonl")]
    run.ok("load", "shop", "one", *files, "--key", "id")
    run.ok("load", "shop", "two", files[0], "--key", "id")
    run.ok("load", "shop", "two", files[1])
    run.ok("load", "shop", "two", files[2])
    db = conn.open_db("shop")
    assert list(db.scan("one")) == list(db.scan("two"))
    assert db.get_records("one", [2])[2] == {"id": 2, "code": "007"}
