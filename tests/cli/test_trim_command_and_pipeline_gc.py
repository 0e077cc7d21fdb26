"""``merkle db trim`` (RefManager.trim for operators) and the CLI advice that names it.

doc/cli.md: a status-1 error's advice names the command or option to use, not
a Python call. `merkle db list` and `merkle gc` on a lake with a damaged
journal entry advised ``conn.refs.trim(...)`` "with the Python API", and no
command could trim. The pipeline's garbage collection (the other half of this
file's name) needs Spark: it is checked in tests/spark/test_pipeline_gc.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import merkle
from merkle.errors import MerkleError

from .helpers import Run


def _versions(conn: merkle.Connection, name: str, count: int) -> None:
    """Database ``name`` with versions 0 .. ``count - 1`` (one row added per commit)."""
    db = conn.create_db(name).create_table("t", key="id")
    for i in range(count - 1):
        db = db.write("t", [{"id": i}]).commit()
    assert conn.history(name, limit=1)[0].version == count - 1


def _entry(lake_uri: str, name: str, version: int) -> Path:
    return Path(lake_uri.removeprefix("file://")) / "refs" / name / f"{version:020d}"


def _kept(conn: merkle.Connection, name: str) -> list[int]:
    return sorted(entry.version for entry in conn.history(name))


@pytest.mark.parametrize("args", [("db", "list"), ("gc", "--dry-run")])
def test_damaged_entry_advice_names_the_trim_command(
    run: Run, conn: merkle.Connection, lake_uri: str, args: tuple[str, ...]
) -> None:
    conn.create_db("shop")
    conn.create_db("other")
    _entry(lake_uri, "other", 0).write_bytes(b"junk")
    line = run.fails(*args)
    assert "`merkle db trim other --below 1`" in line
    assert "conn.refs" not in line
    assert "Python API" not in line


def test_journal_gap_advice_names_the_trim_command(
    run: Run, conn: merkle.Connection, lake_uri: str
) -> None:
    _versions(conn, "shop", 4)
    _entry(lake_uri, "shop", 1).unlink()
    line = run.fails("gc", "--dry-run")
    assert "merkle db trim DB --below" in line
    assert "conn.refs" not in line
    assert "Python API" not in line


def test_trim_removes_the_versions_below_and_says_which(run: Run, conn: merkle.Connection) -> None:
    _versions(conn, "shop", 5)
    out = run.ok("db", "trim", "shop", "--below", "2").stdout
    assert "removed versions 0 to 1" in out
    assert "keeps versions 2 to 4" in out
    assert _kept(conn, "shop") == [2, 3, 4]
    with pytest.raises(MerkleError):
        conn.open_db("shop", version=1)
    out = run.ok("db", "trim", "shop", "--below", "3").stdout
    assert "removed version 2;" in out
    out = run.ok("db", "trim", "shop", "--below", "3").stdout  # again: harmless
    assert out.startswith("nothing to trim")
    assert _kept(conn, "shop") == [3, 4]


def test_trim_refuses_to_remove_the_head(run: Run, conn: merkle.Connection) -> None:
    _versions(conn, "shop", 3)
    line = run.fails("db", "trim", "shop", "--below", "3")
    assert "head of database 'shop' (version 2)" in line
    assert "--below 2 or less" in line
    assert _kept(conn, "shop") == [0, 1, 2]  # nothing trimmed
    assert "does not exist" in run.fails("db", "trim", "nope", "--below", "1")
    assert run("db", "trim", "shop", "--below", "0").exit_code == 2


def test_damaged_head_is_given_up_by_drop_then_trim(
    run: Run, conn: merkle.Connection, lake_uri: str
) -> None:
    """doc/operations.md, "Damaged lake objects": a damaged head, dropped, then trimmed."""
    conn.create_db("shop")
    conn.create_db("other")
    _entry(lake_uri, "other", 0).write_bytes(b"junk")
    assert "trimming never removes" in run.fails("db", "trim", "other", "--below", "1")
    run.ok("db", "drop", "other")
    out = run.ok("db", "trim", "other", "--below", "1").stdout
    assert "removed version 0;" in out
    assert not _entry(lake_uri, "other", 0).exists()
    run.ok("gc", "--dry-run")  # collections run again
