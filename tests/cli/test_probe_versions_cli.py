"""The command line as an adversarial probe of versions found it.

- `merkle diff` showed nothing for a change of the database metadata (even with
  --stat), and `t 0 0 0 changed` for a schema or table-metadata change.
- After a collection fenced the journal (a `gc fence` entry repeating the head),
  the default `merkle diff DB` compared the fence with the version it repeats:
  nothing, though the last change was just below.
- `merkle tag delete DB` / `merkle tag create DB` with the tag name forgotten
  tagged a database named `delete` / `create`.
- `merkle gc --keep-within 6M` kept six minutes; the CLI's own check of a unit
  given twice now lives in the one parser.
- `merkle gc` waited up to a minute in silence for another collection's lock.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

import merkle
import merkle.cli.gc
from merkle.refs import LeaseManager

from .helpers import Run


def _jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def versions(conn: merkle.Connection) -> merkle.Database:
    """v1: table t with a record; v2: database metadata; v3: a schema change; v4: the
    table's metadata; v5: a created empty table."""
    db = conn.create_db("shop", metadata={"owner": "ops"})
    db = db.create_table("t", key="id").write("t", [{"id": 1, "v": "a"}]).commit()
    db = db.alter_db_meta(lambda m: {"owner": "mallory"}).commit()
    db = db.alter_schema("t", add={"z": pa.int32()}).commit()
    db = db.alter_table_meta("t", lambda m: {"note": "x"}).commit()
    return db.create_table("empty", key="k").commit()


def test_diff_shows_a_change_of_the_database_metadata(run: Run, versions: Any) -> None:
    rows = _jsonl(run.ok("diff", "shop", "1", "2", "-f", "jsonl").stdout)
    assert rows == [
        {
            "table": None,
            "key": None,
            "change": "metadata",
            "old": {"owner": "ops"},
            "new": {"owner": "mallory"},
        }
    ]
    stat = _jsonl(run.ok("diff", "shop", "1", "2", "--stat", "-f", "jsonl").stdout)
    assert stat == [
        {"table": None, "inserted": 0, "updated": 0, "deleted": 0, "status": "metadata changed"}
    ]
    table = run.ok("diff", "shop", "1", "2", "-f", "table").stdout
    assert 'metadata  {"owner":"ops"}  {"owner":"mallory"}' in table
    csv = run.ok("diff", "shop", "1", "2", "--stat", "-f", "csv").stdout.splitlines()
    assert csv == ["table,inserted,updated,deleted,status", ",0,0,0,metadata changed"]
    assert json.loads(run.ok("diff", "shop", "1", "2", "-f", "json").stdout)[0]["change"] == (
        "metadata"
    )
    # --table: the database's metadata is no change of that table
    assert run.ok("diff", "shop", "1", "2", "--table", "t", "-f", "jsonl").stdout == ""


def test_diff_shows_schema_and_table_metadata_changes(run: Run, versions: Any) -> None:
    (schema,) = _jsonl(run.ok("diff", "shop", "2", "3", "-f", "jsonl").stdout)
    assert schema["table"] == "t"
    assert schema["change"] == "altered"
    assert schema["key"] is None
    assert set(schema["old"]) == set(schema["new"]) == {"schema"}
    assert [f for f in schema["new"]["schema"] if f not in schema["old"]["schema"]] == ["z: int32"]
    (meta,) = _jsonl(run.ok("diff", "shop", "3", "4", "-f", "jsonl").stdout)
    assert (meta["change"], meta["old"], meta["new"]) == (
        "altered",
        {"metadata": None},
        {"metadata": {"note": "x"}},
    )
    stat = _jsonl(run.ok("diff", "shop", "2", "4", "--stat", "-f", "jsonl").stdout)
    assert [(r["table"], r["status"]) for r in stat] == [("t", "changed (metadata, schema)")]
    assert "changed (schema)" in run.ok("diff", "shop", "2", "3", "--stat", "-f", "table").stdout


def test_diff_shows_a_created_empty_table(run: Run, versions: Any) -> None:
    rows = _jsonl(run.ok("diff", "shop", "-f", "jsonl").stdout)
    assert rows == [{"table": "empty", "key": None, "change": "created", "old": None, "new": None}]


def test_record_changes_follow_their_tables_settings_row(run: Run, conn: Any) -> None:
    db = conn.create_db("shop").create_table("t", key="id")
    db = db.write("t", [{"id": 1, "v": "a"}]).commit()
    db.write("t", [{"id": 2, "v": "b", "w": 5}]).commit()  # a new field: a schema change
    rows = _jsonl(run.ok("diff", "shop", "-f", "jsonl").stdout)
    assert [(r["table"], r["key"], r["change"]) for r in rows] == [
        ("t", None, "altered"),
        ("t", 2, "insert"),
    ]


def test_default_diff_skips_gc_fences(run: Run, conn: merkle.Connection) -> None:
    db = conn.create_db("shop").create_table("t", key="id")
    db = db.write("t", [{"id": 1, "v": "a"}]).commit()
    db.write("t", [{"id": 1, "v": "changed"}]).commit(message="the change")
    conn.refs.fence("shop", 7)  # what a collection that passed a stalled writer appends
    conn.refs.fence("shop", 8)
    head = conn.history("shop")[0]
    assert head.fence
    assert head.version == 4
    rows = _jsonl(run.ok("diff", "shop", "-f", "jsonl").stdout)
    assert [(r["key"], r["change"], r["new"]) for r in rows] == [
        (1, "update", {"id": 1, "v": "changed"})
    ]
    # Named versions are compared as named: the fence repeats version 2.
    assert run.ok("diff", "shop", "3", "-f", "jsonl").stdout == ""


def test_default_diff_of_a_fence_over_the_first_version_asks_for_v1(
    run: Run, conn: merkle.Connection
) -> None:
    conn.create_db("shop")
    conn.refs.fence("shop", 1)
    line = run.fails("diff", "shop")
    assert "version 1 of 'shop' is a gc fence over version 0, which has no parent" in line
    assert "name V1" in line


def test_tag_with_the_name_forgotten_is_a_usage_error(run: Run, conn: merkle.Connection) -> None:
    conn.create_db("shop")
    conn.create_db("delete")
    for verb in ("delete", "create"):
        result = run("tag", verb, "shop")
        assert result.exit_code == 2, result.output
        assert f"`tag {verb} DB NAME` is missing the tag NAME after 'shop'" in result.output
        assert f"`merkle tag {verb} shop NAME`" in result.output
    assert conn.tags("delete") == []
    assert conn.tags("shop") == []
    # A database named 'create' and a word that names no database: the plain form.
    conn.create_db("create")
    assert "tagged version 0 of 'create' as 'c1'" in run.ok("tag", "create", "c1").stdout
    assert run("tag", "create", "shop").exit_code == 2, "'shop' is a database: NAME forgotten"
    assert run("tag", "delete", "c1").exit_code == 2, "a delete never makes a tag"
    assert [t.name for t in conn.tags("create")] == ["c1"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--keep-within", "6M"), "'M' is not a unit (months? minutes?): write 6m for minutes"),
        (("--grace", "2H"), "units are lower case: write 2h, not 2H"),
        (("--grace", "1h1h"), "gives the unit 'h' more than once"),
    ],
)
def test_gc_durations_are_read_by_the_one_parser(
    run: Run, conn: merkle.Connection, args: tuple[str, ...], expected: str
) -> None:
    conn.create_db("shop")
    line = run.fails("gc", "--dry-run", *args)
    assert expected in line
    assert "bad duration" in line


def test_gc_says_who_holds_the_lock_it_waits_for(
    run: Run, conn: merkle.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn.create_db("shop")
    held = LeaseManager(conn.store, holder="far-away:99").acquire_gc_lock(30.0)
    told = merkle.cli.gc._tell

    def tell(message: str) -> None:
        told(message)
        if message.startswith("waiting for the GC lock"):
            held.release()  # the other collection ends once this one said it waits

    monkeypatch.setattr(merkle.cli.gc, "_tell", tell)
    result = run.ok("gc", "-f", "jsonl")
    (line,) = [x for x in result.stderr.splitlines() if "GC lock" in x]
    assert line.startswith("merkle gc: waiting for the GC lock (at most 60s)")
    assert "far-away:99 (generation" in line
    assert "`merkle gc --break-lock`" in line
