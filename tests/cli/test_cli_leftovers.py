"""Regressions of the command line: keys in load's duplicate messages, ``--fields`` names
with a comma, control characters in ``--format table``, the literal of a number beyond
float64 in load's messages, and two loads that create the same table at once."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import merkle
from merkle.cli.output import emit_record, emit_rows

from .helpers import Run, assert_one_error_line

# -- 1. a duplicate key is shown as the CLI shows keys ------------------------------------


@pytest.mark.parametrize(
    ("text", "args", "shown"),
    [
        (
            "ts,v\n2024-01-01T00:00:00,1\n2024-01-01T00:00:00,2\n",
            ("--key", "ts", "--key-codec", "timestamp"),
            "2024-01-01T00:00:00+00:00",
        ),
        ("id,v\nab,1\nab,2\n", ("--key", "id", "--key-codec", "bytes"), "ab"),
        (
            "id,v\n1.50,1\n1.50,2\n",
            ("--key", "id", "--column-types", "id:decimal128(10,2)"),
            "1.50",
        ),
        ("a,b,v\nx,1,1\nx,1,2\n", ("--key", "a,b"), '["x",1]'),
        ("id,v\nx,1\nx,2\n", ("--key", "id"), "x"),
    ],
    ids=["timestamp", "bytes", "decimal", "composite", "str"],
)
def test_a_duplicate_key_is_shown_as_scan_shows_keys(
    run: Run, shop: merkle.Database, tmp_path: Path, text: str, args: tuple[str, ...], shown: str
) -> None:
    path = tmp_path / "dup.csv"
    path.write_text(text)
    error = run.fails("load", "shop", "t", str(path), *args)
    assert f"row 2: key {shown} was already read at {path} row 1;" in error
    if "decimal" in args[-1]:
        return  # a decimal is no key (the load refuses it when it writes)
    # The key as shown is the key as get takes it (and as scan prints it).
    run.ok("load", "shop", "t", str(path), *args, "--on-duplicate", "last")
    got = json.loads(run.ok("get", "shop", "t", shown, "-f", "jsonl").stdout)
    assert got["v"] == 2


# -- 2. --fields names a field with a comma -----------------------------------------------


@pytest.fixture
def comma_table(run: Run, shop: merkle.Database, tmp_path: Path) -> Path:
    """Table shop.t with fields id, "a,b", a, b and c (loaded from a CSV header)."""
    path = tmp_path / "comma.csv"
    path.write_text('id,"a,b",a,b,c\n1,x,p,q,y\n')
    run.ok("load", "shop", "t", str(path), "--key", "id")
    return path


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        (['"a,b"'], ["id", "a,b"]),
        (['"a,b",c'], ["id", "a,b", "c"]),
        ([' "a,b" , c '], ["id", "a,b", "c"]),
        (["c", '"a,b"'], ["id", "a,b", "c"]),  # repeated: each occurrence a list of its own
        (["a,b", '"a,b"'], ["id", "a", "b", "a,b"]),  # a,b is two names, as it always was
        (["a", "b"], ["id", "a", "b"]),
    ],
)
@pytest.mark.parametrize("command", ["scan", "get", "diff"])
def test_fields_names_a_field_with_a_comma_in_quotes(
    run: Run, comma_table: Path, command: str, fields: list[str], names: list[str]
) -> None:
    options = [word for name in fields for word in ("--fields", name)]
    if command == "scan":
        out = run.ok("scan", "shop", "t", *options, "-f", "jsonl").stdout
    elif command == "get":
        out = run.ok("get", "shop", "t", "1", *options, "-f", "jsonl").stdout
    else:
        out = run.ok("diff", "shop", "0", "--table", "t", *options, "-f", "jsonl").stdout
    record = [json.loads(line) for line in out.splitlines()][-1]
    got = record["new"] if command == "diff" else record
    assert sorted(got) == sorted(names)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ('"a,b', "opens a quote it does not close"),
        ('"a,b"c', "after the quoted name 'a,b'"),
        ('a,""', "has an empty field name"),
    ],
)
def test_fields_that_do_not_parse_are_a_usage_error(
    run: Run, comma_table: Path, fields: str, said: str
) -> None:
    result = run("scan", "shop", "t", "--fields", fields)
    assert result.exit_code == 2, result.output
    assert said in result.stderr


def test_a_missing_field_lists_the_fields_as_fields_takes_them(run: Run, comma_table: Path) -> None:
    error = run.fails("scan", "shop", "t", "--fields", "nope")
    assert error.endswith('its fields: id, "a,b", a, b, c')


def test_a_key_field_with_a_comma_in_quotes(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    path = tmp_path / "k.csv"
    path.write_text('"k,1",v\n1,a\n2,b\n')
    run.ok("load", "shop", "t", str(path), "--key", '"k,1"')
    assert conn.open_db("shop").describe_table("t")["key"] == "k,1"
    run.ok("table", "create", "shop", "u", "--key", '"k,1",x', "--family", 'f="a,b",c')
    info = conn.open_db("shop").describe_table("u")
    assert (info["key"], info["families"]) == (["k,1", "x"], {"f": ["a,b", "c"]})


# -- 3. --format table escapes control characters -----------------------------------------

CONTROL = {"id": 1, "a\nb": "x\x1by\x07z\x85w\u2028v", "c": "p\r\nq\tr\x00"}


def test_table_escapes_control_characters_of_values_and_field_names() -> None:
    out = io.StringIO()
    emit_rows([CONTROL], "table", file=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].split() == ["id", "a\\nb", "c"]
    assert lines[2].split() == ["1", "x\\x1by\\x07z\\x85w\\u2028v", "p\\r\\nq\\tr\\x00"]
    # The columns line up: each starts where its rule starts.
    starts = [i for i, ch in enumerate(lines[1]) if ch == "-" and lines[1][i - 1 : i] in ("", " ")]
    assert [lines[0][i - 1 : i] in ("", " ") for i in starts] == [True] * 3
    record = io.StringIO()
    emit_record({"a\nb": "x\x1b"}, "table", file=record)
    assert record.getvalue() == "a\\nb  x\\x1b\n"


def test_scan_escapes_control_characters_in_the_table_format_only(
    run: Run, conn: merkle.Connection, shop: merkle.Database
) -> None:
    shop.create_table("t", key="id").write("t", [CONTROL]).commit()
    table = run.ok("scan", "shop", "t", "-f", "table").stdout.splitlines()
    assert len(table) == 3, table  # a header, a rule, one line a record
    assert table[0].split() == ["id", "a\\nb", "c"]
    for fmt in ("jsonl", "json", "csv"):
        out = run.ok("scan", "shop", "t", "-f", fmt).stdout_bytes.decode()  # (.stdout drops \r)
        if fmt == "csv":
            rows = list(csv.DictReader(io.StringIO(out, newline="")))
            assert rows == [{k: str(v) for k, v in CONTROL.items()}]
        else:
            assert json.loads(out if fmt == "jsonl" else out.strip()[1:-1]) == CONTROL


# -- 4. a number beyond float64 is quoted as written --------------------------------------


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        # The table's binary field makes the file read line by line when a float is "NaN".
        (
            ['{"id":2,"x":"NaN","b":"00"}', '{"id":3,"x":1e400,"b":"01"}'],
            "row 2, field 'x', key 3: value 1e400 is beyond",
        ),
        (['{"id":3,"x":-1.5E+999,"b":"01"}'], "row 1, field 'x', key 3: value -1.5E+999 is beyond"),
        (['{"id":3,"x":[1e400],"b":"01"}'], "value [1e400] is not double"),
        # A field the table does not have yet, in a file read line by line: refused too,
        # as in a file pyarrow reads (it was stored as Infinity).
        (
            ['{"id":5,"x":"NaN","b":"01","y":1e400}'],
            "row 1, field 'y', key 5: value 1e400 is beyond",
        ),
        (
            ['{"id":5,"x":"NaN","b":"01","y":{"q":[2e999]}}'],
            "field 'y.q', key 5: value 2e999 is beyond",
        ),
    ],
)
def test_a_number_beyond_float64_is_quoted_as_written(
    run: Run,
    conn: merkle.Connection,
    shop: merkle.Database,
    tmp_path: Path,
    lines: list[str],
    said: str,
) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("b", pa.binary())])
    shop.create_table("t", key="id", schema=schema).commit()
    path = tmp_path / "big.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    error = run.fails("load", "shop", "t", str(path))
    assert said in error
    assert "inf" not in error.replace("Infinity", "")
    assert conn.open_db("shop").describe_table("t")["count"] == 0


# -- 5. two loads create the same table at once -------------------------------------------

MINE = [{"id": 1, "v": "mine"}, {"id": 2, "v": "mine"}]
THEIRS = [{"id": 2, "v": "theirs"}, {"id": 3, "v": "theirs"}]


def _race(monkeypatch: pytest.MonkeyPatch, conn: merkle.Connection, made: Any) -> None:
    """Make the command's commit lose: just before it, another connection commits
    ``made(database)`` (the table created by another load), once."""
    commit = merkle.Database.commit

    def losing(self: merkle.Database, *args: Any, **kwargs: Any) -> merkle.Database:
        monkeypatch.setattr(merkle.Database, "commit", commit)
        commit(made(conn.open_db("shop")))
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(merkle.Database, "commit", losing)


@pytest.mark.parametrize("stdin", [False, True], ids=["file", "stdin"])
def test_a_load_that_loses_the_creation_loads_into_the_table_made(
    run: Run,
    conn: merkle.Connection,
    shop: merkle.Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stdin: bool,
) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in MINE))
    _race(monkeypatch, conn, lambda db: db.create_table("t", key="id").write("t", THEIRS))
    if stdin:
        args = ("load", "shop", "t", "-", "--key", "id", "-f", "jsonl")
        out = run.ok(*args, input=path.read_text()).stdout
    else:
        out = run.ok("load", "shop", "t", str(path), "--key", "id").stdout
    assert out.startswith("loaded 2 rows into shop.t (version 2)")
    assert "created meanwhile by another commit (version 1)" in out
    got = list(conn.open_db("shop").scan("t"))
    assert got == [*MINE, THEIRS[1]]  # the load's rows written over the table made
    assert [e.version for e in conn.history("shop")] == [2, 1, 0]


@pytest.mark.parametrize(
    ("made", "said"),
    [
        (
            lambda db: db.create_table("t", key="v"),
            "table 't' was created in database 'shop' by another commit (version 1) while "
            "this load created it, keyed by 'v', not 'id': nothing was loaded; load into it "
            "with --key v",
        ),
        (
            lambda db: db.create_table("t", key="id").write("t", [{"id": 9, "v": 1.5}]),
            "table 't' was created in database 'shop' by another commit (version 1) while "
            "this load created it, and these rows do not fit it",
        ),
    ],
    ids=["another-key", "another-schema"],
)
def test_a_load_that_loses_the_creation_to_another_table_says_so(
    run: Run,
    conn: merkle.Connection,
    shop: merkle.Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    made: Any,
    said: str,
) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in MINE))
    _race(monkeypatch, conn, made)
    result = run("load", "shop", "t", str(path), "--key", "id")
    assert result.exit_code == 1, result.output
    assert_one_error_line(result.stderr)
    assert said in result.stderr
    assert conn.open_db("shop").version == 1  # nothing of this load was committed
