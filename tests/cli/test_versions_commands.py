"""The version commands: diff, merge, tag, push, pull, export, import, and `db log` counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import new_bucket

import merkle

from .helpers import Run


def _setup(run: Run, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("id,v\n1,a\n2,b\n3,c\n")
    (tmp_path / "b.csv").write_text("id,v\n1,z\n4,d\n")
    run.ok("db", "create", "shop")
    run.ok("load", "shop", "t", str(tmp_path / "a.csv"), "--key", "id")
    run.ok("load", "shop", "t", str(tmp_path / "b.csv"), "--key", "id")


def _jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_diff_prints_changed_records_and_counts(run: Run, tmp_path: Path) -> None:
    _setup(run, tmp_path)
    rows = _jsonl(run.ok("diff", "shop", "-f", "jsonl").stdout)
    assert [(r["key"], r["change"]) for r in rows] == [(1, "update"), (4, "insert")]
    assert rows[0]["old"] == {"id": 1, "v": "a"}
    assert rows[0]["new"] == {"id": 1, "v": "z"}
    stat = _jsonl(run.ok("diff", "shop", "0", "2", "--stat", "-f", "jsonl").stdout)
    assert stat == [{"table": "t", "inserted": 4, "updated": 0, "deleted": 0, "status": "created"}]
    assert "no version 9" in run.fails("diff", "shop", "9")


def test_log_counts_the_changes_of_each_version(run: Run, tmp_path: Path) -> None:
    _setup(run, tmp_path)
    rows = _jsonl(run.ok("db", "log", "shop", "-f", "jsonl").stdout)
    assert [r["changes"] for r in rows] == ["+1 ~1 -0", "+3 ~0 -0", "+0 ~0 -0"]
    quiet = _jsonl(run.ok("db", "log", "shop", "--no-counts", "-f", "jsonl").stdout)
    assert all(r["changes"] is None for r in quiet)


def test_merge_conflict_fails_then_resolves(
    run: Run, tmp_path: Path, conn: merkle.Connection
) -> None:
    _setup(run, tmp_path)
    run.ok("db", "clone", "shop", "dev")
    (tmp_path / "c.csv").write_text("id,v\n1,dev\n")
    (tmp_path / "d.csv").write_text("id,v\n1,main\n")
    run.ok("load", "dev", "t", str(tmp_path / "c.csv"), "--key", "id")
    run.ok("load", "shop", "t", str(tmp_path / "d.csv"), "--key", "id")
    line = run.fails("merge", "dev", "shop")
    assert "conflicts (t: 1 keys)" in line
    assert "whole table" not in line  # record conflicts are settled record by record
    assert (
        "merged 'dev' into 'shop'" in run.ok("merge", "dev", "shop", "--resolve", "theirs").stdout
    )
    assert conn.open_db("shop").get_records("t", [1]) == {1: {"id": 1, "v": "dev"}}
    assert conn.history("shop")[0].merged_from == {"db": "dev", "version": 1}


def test_log_after_gc_shows_versions_whose_parent_was_trimmed(
    run: Run, tmp_path: Path, conn: merkle.Connection
) -> None:
    """`db log` failed once GC had trimmed the head's parent ("version 1 ... was
    removed by retention"): a version with no parent left has no counts, and one
    whose parent a tag keeps is counted against it (it showed none before)."""
    _setup(run, tmp_path)
    conn.tag("shop", "first", version=1)
    merkle.gc(conn, keep_versions=1, grace="0s")
    rows = _jsonl(run.ok("db", "log", "shop", "-f", "jsonl").stdout)
    assert [(r["version"], r["changes"]) for r in rows] == [(2, "+1 ~1 -0"), (1, None)]


def test_tags(run: Run, tmp_path: Path) -> None:
    _setup(run, tmp_path)
    run.ok("tag", "shop", "v1", "--version", "1", "-m", "first load")
    assert "already names version 1" in run.fails("tag", "shop", "v1")
    tags = _jsonl(run.ok("tag", "list", "shop", "-f", "jsonl").stdout)
    assert [(t["name"], t["version"], t["message"]) for t in tags] == [("v1", 1, "first load")]
    assert "deleted tag 'v1'" in run.ok("tag", "delete", "shop", "v1").stdout
    assert "has no tag" in run.fails("tag", "delete", "shop", "v1")
    assert run("tag", "shop").exit_code == 2


def test_databases_named_like_tag_verbs_can_be_tagged(run: Run) -> None:
    """`tag list v1 -m msg` once listed the tags of `v1` and dropped the message: a
    database named `list`, `delete` or `create` could not be tagged from the CLI."""
    for name in ("list", "delete", "create"):
        run.ok("db", "create", name)
    misuse = run("tag", "list", "v1", "-m", "first")  # a usage error, as click's own
    assert misuse.exit_code == 2
    assert "`merkle tag create list v1`" in misuse.output
    line = run.fails("tag", "list", "v1")
    assert "'v1' does not exist" in line
    assert "`merkle tag create list v1`" in line
    assert "tagged version 0 of 'list' as 'v1'" in run.ok("tag", "create", "list", "v1").stdout
    run.ok("tag", "create", "delete", "d1", "--version", "0")
    assert "tagged version 0 of 'create' as 'c1'" in run.ok("tag", "create", "c1").stdout
    assert [t["name"] for t in _jsonl(run.ok("tag", "list", "list", "-f", "jsonl").stdout)] == [
        "v1"
    ]
    assert "deleted tag 'd1'" in run.ok("tag", "delete", "delete", "d1").stdout
    assert run("tag", "delete", "list", "v1", "--version", "0").exit_code == 2


def test_push_pull_export_import(run: Run, tmp_path: Path, conn: merkle.Connection) -> None:
    _setup(run, tmp_path)
    other = (tmp_path / "other").as_uri()
    merkle.connect(other).close()  # push makes no lake (a mistyped --to is an error)
    assert "sent 3 version(s)" in run.ok("push", "shop", "--to", other).stdout
    assert "up to date" in run.ok("push", "shop", "--to", other).stdout
    run.ok("pull", other, "shop", "--as", "back")
    assert conn.open_db("back").root == conn.open_db("shop").root
    car = tmp_path / "shop.car"
    assert "exported 'shop'" in run.ok("export", "shop", str(car), "--version", "1").stdout
    run.ok("import", str(car), "--db", "copy")
    assert conn.open_db("copy").root == conn.open_db("shop", version=1).root
    car.write_bytes(car.read_bytes()[:-5])
    assert "truncated" in run.fails("import", str(car), "--db", "copy2")
    assert "copy2" not in conn.list_dbs()


def test_a_table_conflict_says_that_resolving_takes_a_whole_table(run: Run, tmp_path: Path) -> None:
    """Both sides add field 'note' with different types: --resolve theirs takes their
    whole table and drops our new row, which the message did not say."""
    _setup(run, tmp_path)
    run.ok("db", "clone", "shop", "dev")
    (tmp_path / "ours.csv").write_text("id,note\n5,1\n")
    (tmp_path / "theirs.csv").write_text("id,note\n6,abc\n")
    run.ok("load", "shop", "t", str(tmp_path / "ours.csv"))
    run.ok("load", "dev", "t", str(tmp_path / "theirs.csv"))
    line = run.fails("merge", "dev", "shop")
    assert "field 'note' changed on both sides" in line
    assert "takes that side's whole table" in line


@pytest.mark.s3
def test_push_and_pull_between_a_file_lake_and_s3_on_an_endpoint(
    run: Run, tmp_path: Path, moto_endpoint: str, conn: merkle.Connection
) -> None:
    """Before: `pull` opened the other lake with no options (a custom endpoint could not
    be reached), and `push` gave a file lake the S3 lake's options ("unknown options for
    file://"): a file lake and an S3 lake on an endpoint could not exchange databases."""
    _setup(run, tmp_path)
    bucket = new_bucket(moto_endpoint)
    s3_lake = f"s3://{bucket}/backup"
    endpoint = ("-O", f"endpoint_url={moto_endpoint}", "-O", "region_name=us-east-1")
    run.ok("push", "shop", "--to", s3_lake, "--create", *endpoint)
    with merkle.connect(
        s3_lake, endpoint_url=moto_endpoint, region_name="us-east-1", create=False
    ) as backup:
        assert backup.open_db("shop").root == conn.open_db("shop").root
    run.ok("pull", s3_lake, "shop", "--as", "restored", *endpoint)
    assert conn.open_db("restored").root == conn.open_db("shop").root
    # From the S3 side: its own -o options, and -O for the file lake (none needed).
    s3_run = Run(s3_lake)
    mine = ("-o", f"endpoint_url={moto_endpoint}", "-o", "region_name=us-east-1")
    s3_run.ok(*mine, "pull", run.lake, "shop", "--as", "again")
    out = s3_run.ok(*mine, "push", "again", "--to", run.lake, "--as", "round-trip").stdout
    assert "sent" in out
    assert conn.open_db("round-trip").root == conn.open_db("shop").root
    # A second S3 lake on the same endpoint takes the -o options by default.
    s3_run.ok(*mine, "push", "again", "--to", f"s3://{bucket}/second", "--create")
