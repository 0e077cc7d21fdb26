"""Bad command-line input is one ``error:`` line and exit status 1, never a traceback.

Each test reproduces one finding of an adversarial test of the command line
(named in its docstring: what the command did before) and checks what it does now.
"""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

import merkle

from .helpers import SCRIPT, Run, assert_one_error_line, process_env

# -- NAME:TYPE lists -------------------------------------------------------------------


def test_a_field_given_twice_a_type_is_an_error(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: the last of the repeated entries silently won."""
    error = run.fails(
        "table", "create", "shop", "t", "--key", "a", "--schema", "a:int32,b:string,b:int64"
    )
    assert error == "error: --schema gives field 'b' more than once; give each field one type"
    assert "t" not in conn.open_db("shop").list_tables()
    run.ok("table", "create", "shop", "t", "--key", "a", "--schema", "a:int32")
    for option in ("--add", "--widen"):
        error = run.fails("table", "alter", "shop", "t", option, "x:int64", option, "x:string")
        assert f"{option} gives field 'x' more than once" in error
    path = tmp_path / "a.csv"
    path.write_text("a,n\n1,2\n")
    error = run.fails("load", "shop", "t", str(path), "--column-types", "n:int8,n:int64")
    assert "--column-types gives field 'n' more than once" in error
    assert [e.version for e in conn.history("shop")] == [1, 0]


# -- tracebacks that are one line now ----------------------------------------------------


def test_export_to_a_missing_folder_is_one_line(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: a FileNotFoundError traceback."""
    target = tmp_path / "no" / "such" / "x.car"
    error = run.fails("export", "shop", str(target))
    assert f"folder {target.parent} does not exist; create it first" in error
    assert not target.parent.exists()


def test_a_header_that_repeats_a_column_is_one_line(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: KeyError 'Field "id" exists 2 times in schema' (a traceback)."""
    path = tmp_path / "dup.csv"
    path.write_text("id,id\n1,2\n")
    error = run.fails("load", "shop", "t", str(path), "--key", "id")
    assert "its header names column 'id' 2 times" in error


@pytest.mark.parametrize(("value", "kind"), [('{"a": 1}', "an object"), ("[1, 2]", "an array")])
def test_a_jsonl_key_that_is_an_object_or_array_is_one_line(
    run: Run, shop: merkle.Database, tmp_path: Path, value: str, kind: str
) -> None:
    """Before: TypeError: unhashable type (a traceback)."""
    path = tmp_path / "k.jsonl"
    path.write_text(f'{{"id": {value}, "v": 1}}\n')
    error = run.fails("load", "shop", "t", str(path), "--key", "id")
    assert f"row 1: the key 'id' is {kind}" in error
    assert "choose another --key field" in error


def _truncated_gzip(path: Path) -> Path:
    data = "id,v\n" + "".join(f"{i},{i * 7}\n" for i in range(200_000))
    path.write_bytes(gzip.compress(data.encode(), compresslevel=6)[:300_000])
    return path


def test_a_truncated_gzip_file_is_one_line(run: Run, shop: merkle.Database, tmp_path: Path) -> None:
    """Before: an OSError traceback ("Truncated compressed stream")."""
    path = _truncated_gzip(tmp_path / "big.csv.gz")
    error = run.fails("load", "shop", "t", str(path), "--key", "id")
    assert "its compressed data is truncated or corrupt" in error
    small = tmp_path / "small.csv.gz"
    small.write_bytes(gzip.compress(b"id,v\n1,a\n2,b\n")[:20])
    error = run.fails("load", "shop", "t", str(small), "--key", "id")
    assert "is truncated or corrupt gzip data" in error  # was: "not gzip-compressed"


def test_files_are_read_without_python_file_objects(
    run: Run, shop: merkle.Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cause of the abort below, checked without luck: Arrow's I/O thread must hold
    no Python object (only stdin, which has no native file, is read through one)."""
    made: list[object] = []
    real = pa.PythonFile

    def python_file(*args: object, **kwargs: object) -> object:
        made.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(pa, "PythonFile", python_file)
    path = _truncated_gzip(tmp_path / "big.csv.gz")
    run.fails("load", "shop", "t", str(path), "--key", "id")
    plain = tmp_path / "a.csv"
    plain.write_text("id,v\n1,a\n")
    run.ok("load", "shop", "t", str(plain), "--key", "id")
    assert made == []
    run.ok("load", "shop", "t", "-", "--format", "csv", input="id,v\n2,b\n")
    assert len(made) == 1


@pytest.mark.slow
def test_a_truncated_gzip_file_never_aborts_the_process(tmp_path: Path) -> None:
    """Before: 1 run in 12 to 1 in 7 ended in SIGABRT ("terminate called without an
    active exception"): the reader's I/O thread released a Python file object while
    the interpreter exited. 20 clean runs in a row had a chance of at most
    (11/12)**20, about 18%, with that defect (5% at the rate of 1 in 7): this end-to-end
    check is kept short for CI's time, and the test above checks the cause without luck."""
    lake = (tmp_path / "lake").as_uri()
    path = _truncated_gzip(tmp_path / "big.csv.gz")
    env = process_env(lake)
    subprocess.run([str(SCRIPT), "db", "create", "shop"], env=env, check=True, timeout=120)
    command = [str(SCRIPT), "load", "shop", "t", str(path), "--key", "id"]

    # One run at a time: runs side by side on two cores aborted far less often (0 of 40).
    runs = [
        subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        for _ in range(20)
    ]
    killed = [done.returncode for done in runs if done.returncode < 0]
    assert killed == [], f"{len(killed)} of {len(runs)} runs were killed (-6: SIGABRT)"
    for attempt, done in enumerate(runs):
        assert done.returncode == 1, (attempt, done.returncode, done.stderr)
        assert_one_error_line(done.stderr)
        assert "truncated or corrupt" in done.stderr


def test_gzip_data_on_stdin_says_so(run: Run, shop: merkle.Database) -> None:
    """Before: "Empty CSV file"."""
    data = gzip.compress(b"id,v\n1,a\n")
    error = run.fails("load", "shop", "t", "-", "--format", "csv", "--key", "id", input=data)
    assert "stdin holds gzip-compressed data: decompress it first" in error


def test_an_output_encoding_that_cannot_hold_a_value_escapes_it(
    run: Run, lake_uri: str, shop: merkle.Database
) -> None:
    """Before: UnicodeEncodeError (a traceback) with PYTHONIOENCODING=latin-1."""
    shop.create_table("e", key="id").write("e", [{"id": 1, "v": "caf\xe9 \U0001f600"}]).commit()
    env = {**process_env(lake_uri), "PYTHONIOENCODING": "latin-1"}
    outputs = {}
    for fmt in ("jsonl", "table", "csv"):
        done = subprocess.run(
            [str(SCRIPT), "scan", "shop", "e", "-f", fmt], env=env, capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        outputs[fmt] = done.stdout.decode("latin-1")
    assert outputs["jsonl"] == '{"id": 1, "v": "caf\\u00e9 \\ud83d\\ude00"}\n'  # valid JSON
    assert "caf\xe9 \\U0001f600" in outputs["table"]  # what latin-1 holds, the rest escaped
    assert outputs["csv"] == "id,v\n1,caf\xe9 \\U0001f600\n"


# -- refusals ---------------------------------------------------------------------------


def test_a_header_without_the_key_column_is_an_error_without_rows_too(
    run: Run, conn: merkle.Connection, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: the table was created and "loaded 0 rows" committed."""
    header = tmp_path / "h.csv"
    header.write_text("a,b\n")
    rows = tmp_path / "r.csv"
    rows.write_text("a,b\n1,2\n")
    for path in (header, rows):
        error = run.fails("load", "shop", "t", str(path), "--key", "id")
        assert error == f"error: {path} has no column 'id', a key field (columns: ['a', 'b'])"
    assert conn.open_db("shop").list_tables() == []
    assert [e.version for e in conn.history("shop")] == [0]


def test_push_pull_and_import_make_no_lake_at_a_mistyped_path(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    """Before: each of them created an empty lake at the path."""
    shop.create_table("t", key="id").write("t", [{"id": 1}]).commit()
    missing = tmp_path / "mistyped"
    assert "there is no merkle lake at" in run.fails("push", "shop", "--to", str(missing))
    assert not missing.exists()
    car = tmp_path / "shop.car"
    run.ok("export", "shop", str(car))
    other = Run(missing.as_uri())
    assert "there is no merkle lake at" in other.fails("pull", run.lake, "shop")
    assert "there is no merkle lake at" in other.fails("import", str(car), "--db", "copy")
    assert not missing.exists()
    # --create makes the destination lake, and only then.
    run.ok("push", "shop", "--to", str(missing), "--create")
    assert merkle.connect(str(missing)).open_db("shop").get_records("t", [1]) == {1: {"id": 1}}
    for made in (tmp_path / "pulled", tmp_path / "imported"):
        assert "there is no merkle lake at" in Run(made.as_uri()).fails("pull", run.lake, "shop")
    Run((tmp_path / "pulled").as_uri()).ok("pull", run.lake, "shop", "--create")
    Run((tmp_path / "imported").as_uri()).ok("import", str(car), "--db", "copy", "--create")
    assert merkle.connect(str(tmp_path / "imported")).open_db("copy").list_tables() == ["t"]


def test_scan_and_get_refuse_an_unknown_field(run: Run, shop: merkle.Database) -> None:
    """Before: --fields nope was ignored (records printed without it)."""
    shop.create_table("t", key="id").write("t", [{"id": 1, "name": "a", "n": 2}]).commit()
    for command in (("scan", "shop", "t"), ("get", "shop", "t", "1")):
        error = run.fails(*command, "--fields", "name,nope")
        assert error == "error: --fields: table shop.t has no field 'nope'; its fields: id, name, n"
    assert run.ok("get", "shop", "t", "1", "--fields", "n").stdout == '{"id": 1, "n": 2}\n'
