"""``diff(fields=...)`` naming a field no table of the diff has is an error.

Found by an adversarial probe: a typo in ``fields`` compared nothing, so
the diff reported no updates (and ``merkle diff --fields`` exited 0 with an
empty result) while every read naming an unknown field is a UsageError.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import merkle
from merkle.cli.main import cli
from merkle.errors import UsageError


@pytest.fixture
def db(tmp_path: Path) -> merkle.Database:
    conn = merkle.connect(str(tmp_path / "lake"), create=True)
    db = conn.create_db("s").create_table("t", key="k").create_table("u", key="id")
    db = db.write("t", [{"k": 1, "price": 1, "gone": 1}]).write("u", [{"id": 1, "name": "a"}])
    db = db.commit()
    db = db.write("t", [{"k": 1, "price": 2}]).write("u", [{"id": 1, "name": "b"}])
    return db.alter_schema("t", drop=["gone"]).commit()


def test_an_unknown_field_is_a_usage_error(db: merkle.Database) -> None:
    with pytest.raises(UsageError, match=r"table 't' has no field 'prcie'.*price"):
        db.diff(db.version - 1, table="t", fields=["prcie"])
    with pytest.raises(UsageError, match="no table of the diff has a field 'prcie'"):
        db.diff(db.version - 1, fields=["prcie"])


def test_a_field_of_some_tables_or_of_one_side_is_compared(db: merkle.Database) -> None:
    assert db.diff(db.version - 1, fields=["price"])["t"].counts().updated == 1
    assert db.diff(db.version - 1, fields=["name"])["u"].counts().updated == 1
    assert db.diff(db.version - 1, table="t", fields=["gone"]).tables  # only in the old side
    assert db.diff(db.version - 1, table="t", fields=["k"])  # a key field


def test_the_cli_fails_in_one_line(db: merkle.Database, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["--lake", str(tmp_path / "lake"), "diff", "s", "--fields", "prcie"]
    )
    assert result.exit_code == 1
    assert "no field 'prcie'" in result.output or "'prcie'" in result.output
    assert "Traceback" not in result.output
