"""CLI defects found by a probe (second round): each test failed before its fix.

A field given twice to ``table alter --rename`` (the last rename won, silently)
or to ``--drop``/``--nullable``/``--free`` (an error saying the table has no
such field); the ``tag list|delete`` advice naming an invalid, unquoted command;
``push --to`` a location with no lake advising only the Python API.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import merkle

from .helpers import Run


def _table(run: Run, conn: merkle.Connection) -> int:
    run.ok("table", "create", "shop", "t", "--key", "id", "--schema", "id:int64,a:int32,b:int32")
    return len(conn.history("shop"))


def test_alter_refuses_a_rename_given_twice(
    run: Run, conn: merkle.Connection, shop: merkle.Database
) -> None:
    versions = _table(run, conn)
    line = run.fails("table", "alter", "shop", "t", "--rename", "a=z", "--rename", "a=y")
    assert "--rename gives field 'a' more than once" in line
    line = run.fails("table", "alter", "shop", "t", "--rename", "a=z", "--rename", "b=z")
    assert "--rename gives the new name 'z' more than once" in line
    assert len(conn.history("shop")) == versions


def test_alter_names_the_field_a_repeatable_option_gives_twice(
    run: Run, conn: merkle.Connection, shop: merkle.Database
) -> None:
    versions = _table(run, conn)
    for option in ("--drop", "--nullable", "--free"):
        line = run.fails("table", "alter", "shop", "t", option, "a", option, "a")
        assert f"{option} gives field 'a' more than once" in line, line
    assert len(conn.history("shop")) == versions


def test_tag_verb_advice_is_a_valid_quoted_command(run: Run, conn: merkle.Connection) -> None:
    run.ok("db", "create", "delete")
    run.ok("db", "create", "my shop")
    run.ok("tag", "my shop", "v 1")

    def advice(*args: str) -> list[list[str]]:
        result = run("tag", *args)
        assert result.exit_code == 2, result.output
        text = " ".join(result.output.split())
        parts = text.split("use `")[1:]
        assert parts, text
        return [shlex.split(part.split("`")[0])[1:] for part in parts]

    # Three arguments fit only `tag delete DB NAME`: no `tag create` of four.
    assert advice("delete", "my shop", "v 1", "-m", "hi") == [["tag", "delete", "my shop", "v 1"]]
    # Two fit only tagging the database named `delete`.
    (create,) = advice("delete", "my shop", "-m", "hi")
    assert create == ["tag", "create", "delete", "my shop"]
    run.ok(*create)
    assert [t.name for t in conn.tags("delete")] == ["my shop"]
    assert [t.name for t in conn.tags("my shop")] == ["v 1"]


def test_push_to_no_lake_names_the_cli_flag(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    line = run.fails("push", "shop", "--to", str(tmp_path / "no lake"))
    assert "there is no merkle lake at" in line
    assert "--create" in line
    assert not (tmp_path / "no lake").exists()


def test_alter_that_changes_nothing_says_so_and_makes_no_version(
    run: Run, conn: merkle.Connection, shop: merkle.Database
) -> None:
    run.ok("table", "create", "shop", "t", "--key", "id", "--schema", "id:int64,a:int32")
    first = run.ok("table", "alter", "shop", "t", "--nullable", "a").output
    again = run.ok("table", "alter", "shop", "t", "--nullable", "a").output
    assert "altered" in first or "no change" in first
    assert again.startswith("no change")
    assert len(conn.history("shop")) == 2


def test_import_of_a_file_that_is_no_car_says_so(
    run: Run, shop: merkle.Database, tmp_path: Path
) -> None:
    """It said "a.csv is truncated: a header of 107 bytes has 11"."""
    data = tmp_path / "a.csv"
    data.write_text("k,v\n1,2\n3,4\n")
    error = run.fails("import", str(data), "--db", "y")
    assert "is not a CAR file" in error
