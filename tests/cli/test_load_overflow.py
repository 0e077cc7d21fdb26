"""``merkle load`` refuses a number beyond float64's range (``1e400``) as it refuses one
beyond float32's: never stored as Infinity, whether the field is declared, given by
``--column-types``, inferred on first load, or the key; ``inf``, ``Infinity`` and
``NaN`` (what ``merkle scan`` writes) still load."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

import merkle
from merkle.cli import inferred, sources

from .helpers import Run

#: A file holding a number beyond float64 in its second row, and the value as shown.
OVERFLOWS = [
    ("a.csv", "id,f\n1,2.5\n2,1e400\n", "'1e400'"),
    ("b.csv", "id,f\n1,2.5\n2, -1e999\n", "'-1e999'"),
    ("a.jsonl", '{"id": 1, "f": 2.5}\n{"id": 2, "f": "1e400"}\n', "'1e400'"),
]
#: The literals scan writes for the values beyond every number, and numbers in range.
SPECIALS = {
    "csv": "id,f\n1,inf\n2,-Infinity\n3,NaN\n4, 0.5\n5,1e308\n",
    "jsonl": '{"id": 1, "f": "Infinity"}\n{"id": 2, "f": "-Infinity"}\n{"id": 3, "f": "NaN"}\n'
    '{"id": 4, "f": 0.5}\n{"id": 5, "f": 1e308}\n',
}


def _rows(conn: merkle.Connection, table: str = "t") -> list[dict[str, object]]:
    return sorted(conn.open_db("s").scan(table), key=lambda r: str(r["id"]))


def _specials_load(run: Run, conn: merkle.Connection, path: Path, *args: str) -> None:
    path.write_text(SPECIALS[path.suffix.lstrip(".")])
    run.ok("load", "s", "u", str(path), *args)
    got = [r["f"] for r in _rows(conn, "u")]
    assert got[:2] == [math.inf, -math.inf]
    assert math.isnan(got[2])  # type: ignore[arg-type]
    assert got[3:] == [0.5, 1e308]


@pytest.mark.parametrize(("name", "text", "shown"), OVERFLOWS)
@pytest.mark.parametrize("how", ["declared", "column-types"])
def test_float64_overflow_is_refused(
    run: Run, conn: merkle.Connection, tmp_path: Path, name: str, text: str, shown: str, how: str
) -> None:
    schema = pa.schema([("id", pa.int64()), ("f", pa.float64())])
    conn.create_db("s").create_table("t", key="id", schema=schema).commit()
    path = tmp_path / name
    path.write_text(text)
    if how == "declared":
        line = run.fails("load", "s", "t", str(path))
    else:
        line = run.fails("load", "s", "u", str(path), "--key", "id", "--column-types", "f:float64")
    assert f"row 2, field 'f', key 2: value {shown} is beyond the range of float64" in line
    assert "decimal256(76,0)" in line  # what keeps it
    assert _rows(conn) == []
    extra = ["--column-types", "f:float64"] if how == "column-types" else []
    conn.open_db("s").create_table("u", key="id", schema=schema).commit()
    _specials_load(run, conn, path, *extra)


@pytest.mark.parametrize("stdin", [False, True])
@pytest.mark.parametrize(
    ("name", "text", "shown"),
    [
        *OVERFLOWS[:2],
        ("c.jsonl", '{"id": 1, "f": 2.5}\n{"id": 2, "f": -1e400}\n', "-1e400"),
    ],
)
def test_inferred_float_overflow_is_refused(
    run: Run,
    conn: merkle.Connection,
    tmp_path: Path,
    name: str,
    text: str,
    shown: str,
    stdin: bool,
) -> None:
    run.ok("db", "create", "s")
    path = tmp_path / name
    path.write_text(text)
    fmt = path.suffix.lstrip(".")
    where = ["-", "--format", fmt] if stdin else [str(path)]
    line = run.fails("load", "s", "t", *where, "--key", "id", input=text.encode())
    assert f"row 2, field 'f', key 2: value {shown} is beyond the range of float64" in line
    if fmt == "csv":  # pyarrow infers no float from a JSON string: that is text
        _specials_load(run, conn, path, "--key", "id")


@pytest.mark.parametrize(
    ("name", "text", "codec"),
    [
        ("k.csv", "id,v\n1.5,a\n1e400,b\n", ["--key-codec", "float"]),
        ("k.csv", "id,v\n1.5,a\n1e400,b\n", []),
        ("k.jsonl", '{"id": 1.5, "v": "a"}\n{"id": 1e400, "v": "b"}\n', ["--key-codec", "float"]),
        ("k.jsonl", '{"id": 1.5, "v": "a"}\n{"id": 1e400, "v": "b"}\n', []),
        ("s.jsonl", '{"id": 1.5, "v": "a"}\n{"id": "1e400", "v": "b"}\n', ["--key-codec", "float"]),
    ],
)
def test_float_key_overflow_is_refused(
    run: Run, tmp_path: Path, name: str, text: str, codec: list[str]
) -> None:
    run.ok("db", "create", "s")
    path = tmp_path / name
    path.write_text(text)
    line = run.fails("load", "s", "t", str(path), "--key", "id", *codec)
    assert "row 2, field 'id'" in line
    assert "is beyond the range of float64" in line


@pytest.mark.usefixtures("small_blocks")
def test_later_overflow_and_text_in_inferred_float_column(run: Run, tmp_path: Path) -> None:
    run.ok("db", "create", "s")
    path = tmp_path / "big.csv"
    head = "id,v\n" + "".join(f"{i},{i}.5\n" for i in range(400))
    path.write_text(head + "400,1e400\n")
    line = run.fails("load", "s", "t", str(path), "--key", "id")
    assert "row 401, field 'v', key 400: value '1e400' is beyond the range of float64" in line
    path.write_text(head + "400,abc\n")
    line = run.fails("load", "s", "t", str(path), "--key", "id")
    assert "row 401, field 'v', key 400: value 'abc'" in line
    assert "--column-types v:string" in line


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "BLOCK_SIZE", 1 << 10)
    monkeypatch.setattr(inferred, "BLOCK_SIZE", 1 << 10)


@pytest.mark.parametrize(
    ("name", "text", "shown"),
    [
        ("a.jsonl", '{"id": 1, "f": 2.5}\n{"id": 2, "f": "1e400"}\n', "'1e400'"),
        ("b.jsonl", '{"id": 1, "f": 2.5}\n{"id": 2, "f": 1e400}\n', ""),
    ],
)
@pytest.mark.parametrize("kind", [pa.float16(), pa.float32()])
def test_narrow_float_overflow_beyond_float64_is_refused(
    run: Run,
    conn: merkle.Connection,
    tmp_path: Path,
    name: str,
    text: str,
    shown: str,
    kind: pa.DataType,
) -> None:
    schema = pa.schema([("id", pa.int64()), ("f", kind)])
    conn.create_db("s").create_table("t", key="id", schema=schema).commit()
    path = tmp_path / name
    path.write_text(text)
    line = run.fails("load", "s", "t", str(path))
    assert f"row 2, field 'f', key 2: value {shown}" in line
    assert f"is beyond the range of float{kind.bit_width}" in line
