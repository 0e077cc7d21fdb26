"""Every ``merkle`` command on a file lake, checked against the Python API."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import new_bucket

import merkle
from merkle.cli.output import cell, jsonable
from merkle.db.diff import commit_counts
from merkle.refs import JournalEntry

from .helpers import Run, assert_one_error_line

START = datetime(2026, 1, 1, tzinfo=UTC)


def order(i: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "order_id": i,
        "sku": f"sku-{i % 7}",
        "qty": i % 5,
        "price": i * 1.25,
        "placed_at": START + timedelta(hours=i),
    }
    if i % 3 == 0:
        record["blob"] = bytes([i, 0, 255])
        record["tags"] = ["a", f"t{i}"]
    if i % 4 == 0:
        record["doc"] = {"pair": [i, "x"], "ok": True}
    return record


@pytest.fixture
def shop(conn: merkle.Connection) -> merkle.Database:
    """Database ``shop``: v0 empty, v1 with 40 orders, v2 with one changed and one deleted."""
    db = conn.create_db("shop", metadata={"owner": "ops"})
    db = db.create_table(
        "orders", key="order_id", families={"items": {"sku", "qty"}}, schema_free=True
    )
    db = db.write("orders", [order(i) for i in range(40)]).commit(message="seed", author="t")
    return db.write("orders", {5: {"qty": 99}}).delete("orders", [6]).commit(message="fix")


def records(output: str, fmt: str) -> list[dict[str, Any]]:
    """Parse the output of a rows command back (csv gives every cell as text)."""
    if fmt == "json":
        parsed: list[dict[str, Any]] = json.loads(output)
        return parsed
    if fmt == "jsonl":
        return [json.loads(line) for line in output.splitlines()]
    return list(csv.DictReader(io.StringIO(output)))


def expected(rows: list[dict[str, Any]], fmt: str, columns: list[str] | None = None) -> Any:
    """What ``records`` gives back for ``rows`` from the Python API."""
    if fmt != "csv":
        return [jsonable(row) for row in rows]
    names = list(dict.fromkeys([*(columns or []), *(k for row in rows for k in row)]))
    return [{name: cell(row.get(name)) for name in names} for row in rows]


# -- the lake --------------------------------------------------------------------------


def test_lake_from_the_environment_or_the_option(tmp_path: Any) -> None:
    first, second = (tmp_path / "a").as_uri(), (tmp_path / "b").as_uri()
    Run(first).ok("db", "create", "in-a", lake=False, env={"MERKLE_LAKE": first})
    Run(second).ok("db", "create", "in-b")
    # --lake wins over MERKLE_LAKE.
    out = Run(second).ok("db", "list", "--format", "json", env={"MERKLE_LAKE": first}).stdout
    assert [row["name"] for row in json.loads(out)] == ["in-b"]
    out = Run(first).ok("db", "list", "--format", "json", lake=False, env={"MERKLE_LAKE": first})
    assert [row["name"] for row in json.loads(out.stdout)] == ["in-a"]


def test_a_plain_directory_path_is_a_lake(tmp_path: Any) -> None:
    Run(str(tmp_path / "plain")).ok("db", "create", "x")
    with merkle.connect(tmp_path / "plain") as conn:
        assert conn.list_dbs() == ["x"]


def test_version_and_help() -> None:
    run = Run("unused")
    assert run.ok("--version", lake=False).stdout.strip() == f"merkle, version {merkle.__version__}"
    text = run.ok("--help", lake=False).stdout
    for command in ("db", "table", "load", "scan", "get", "compact"):
        assert f"\n  {command} " in text


# -- databases ----------------------------------------------------------------------


def test_db_create_list_describe_drop(run: Run, conn: merkle.Connection) -> None:
    out = run.ok("db", "create", "shop", "--metadata", '{"owner": "ops"}', "-m", "hello").stdout
    assert conn.history("shop")[0].message == "hello"
    assert out == ("created database 'shop' (version 0)\n")
    run.ok("db", "create", "dev")
    listed = json.loads(run.ok("db", "list", "--format", "json").stdout)
    assert [row["name"] for row in listed] == conn.list_dbs() == ["dev", "shop"]
    assert [row["version"] for row in listed] == [0, 0]
    described = json.loads(run.ok("db", "describe", "shop", "--format", "json").stdout)
    assert described == jsonable(conn.open_db("shop").describe())
    assert described["metadata"] == {"owner": "ops"}
    out = run.ok("db", "drop", "dev", "--author", "bob").stdout
    assert out.startswith("dropped database 'dev' at version 1")
    assert conn.list_dbs() == ["shop"]
    assert [(e.message, e.author) for e in conn.history("dev")] == [
        ("drop database dev", "bob"),
        ("create database dev", None),
    ]
    assert run.ok("db", "list", "--format", "csv").stdout.splitlines()[1].startswith("shop,0,")


def test_db_list_of_an_empty_lake(run: Run, conn: merkle.Connection) -> None:
    assert run.ok("db", "list", "--format", "json").stdout == "[]\n"
    assert run.ok("db", "list", "--format", "csv").stdout == "name,version,time\n"


def test_a_location_without_a_lake_is_an_error_not_a_new_lake(run: Run, lake_uri: str) -> None:
    assert "no merkle lake" in run.fails("db", "list")
    assert not Path(lake_uri.removeprefix("file://")).exists()
    run.ok("db", "create", "shop")  # creating a database starts the lake
    assert run.ok("db", "list", "--format", "json").stdout.strip() != "[]"


def _changes(conn: merkle.Connection, entry: JournalEntry) -> str | None:
    counts = commit_counts(conn, entry)
    return None if counts is None else f"+{counts.inserted} ~{counts.updated} -{counts.deleted}"


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv"])
def test_db_log(run: Run, conn: merkle.Connection, shop: merkle.Database, fmt: str) -> None:
    got = records(run.ok("db", "log", "shop", "--format", fmt).stdout, fmt)
    rows = [
        {
            "version": e.version,
            "time": e.time,
            "author": e.author,
            "message": e.message,
            "changes": _changes(conn, e),
            "root": e.root,
            "forked_from": e.forked_from,
            "merged_from": e.merged_from,
        }
        for e in conn.history("shop")
    ]
    assert got == expected(rows, fmt)
    assert [row["message"] for row in records(run.ok("db", "log", "shop").stdout, "jsonl")] == [
        "fix",
        "seed",
        None,
    ]
    assert len(records(run.ok("db", "log", "shop", "--limit", "1").stdout, "jsonl")) == 1


def test_db_clone_at_a_version(run: Run, conn: merkle.Connection, shop: merkle.Database) -> None:
    out = run.ok("db", "clone", "shop", "dev", "--version", "1").stdout
    assert out == "cloned database 'shop' version 1 as 'dev' (version 0)\n"
    dev = conn.open_db("dev")
    assert dev.root == conn.open_db("shop", version=1).root
    entry = conn.history("dev")[0]
    assert entry.forked_from == {"db": "shop", "version": 1}
    assert (entry.message, entry.author) == ("clone shop version 1", None)
    run.ok("db", "clone", "shop", "head", "-m", "copy", env={"MERKLE_AUTHOR": "eve"})
    assert (conn.history("head")[0].message, conn.history("head")[0].author) == ("copy", "eve")
    assert conn.open_db("head").root == shop.root


def test_describe_at_a_time(run: Run, conn: merkle.Connection, shop: merkle.Database) -> None:
    v1 = conn.history("shop")[1]
    out = run.ok("db", "describe", "shop", "--at", v1.time.isoformat(), "--format", "jsonl")
    assert json.loads(out.stdout)["version"] == 1
    out = run.ok("db", "describe", "shop", "--version", "0", "--format", "jsonl")
    assert json.loads(out.stdout)["tables"] == {}


# -- tables -----------------------------------------------------------------------------


def test_table_create_with_options(run: Run, conn: merkle.Connection) -> None:
    run.ok("db", "create", "shop")
    out = run.ok(
        "table",
        "create",
        "shop",
        "events",
        "--key",
        "at",
        "--key-codec",
        "tuple(timestamp, str)",
        "--family",
        "body=text,lang",
        "--family",
        "meta=source",
        "--tablet-size-limit",
        "4096",
        "--branching-factor",
        "8",
        "--patch-limit",
        "2",
        "--patch-share",
        "5",
        "--metadata",
        '{"team": "x"}',
        "--author",
        "ann",
    ).stdout
    assert out == "created table 'events' in database 'shop' (version 1)\n"
    info = conn.open_db("shop").describe_table("events")
    assert info["key"] == "at"
    assert info["key_codec"] == "tuple(timestamp,str)"
    assert info["families"] == {"body": ["lang", "text"], "meta": ["source"]}
    assert info["limits"] == {
        "tablet_size_limit": 4096,
        "branching_factor": 8,
        "patch_limit": 2,
        "patch_share": 5,
    }
    assert info["metadata"] == {"team": "x"}
    head = conn.history("shop")[0]
    assert (head.message, head.author) == ("create table events (key at)", "ann")
    described = run.ok("table", "describe", "shop", "events", "--format", "json").stdout
    assert json.loads(described) == jsonable(info)


def test_table_list_and_drop(run: Run, conn: merkle.Connection, shop: merkle.Database) -> None:
    run.ok("table", "create", "shop", "users", "--key", "email", "-m", "add users")
    assert conn.history("shop")[0].message == "add users"
    listed = json.loads(run.ok("table", "list", "shop", "--format", "json").stdout)
    tables = conn.open_db("shop").describe()["tables"]
    assert listed == [{"name": name, **stats} for name, stats in tables.items()]
    assert [row["name"] for row in listed] == ["orders", "users"]
    old = json.loads(run.ok("table", "list", "shop", "--version", "1", "--format", "json").stdout)
    assert [row["name"] for row in old] == ["orders"]
    out = run.ok("table", "drop", "shop", "users", env={"MERKLE_AUTHOR": "bob"}).stdout
    assert out == "dropped table 'users' from database 'shop' (version 4)\n"
    head = conn.history("shop")[0]
    assert (head.message, head.author) == ("drop table users", "bob")
    assert conn.open_db("shop").list_tables() == ["orders"]


def test_table_create_rejects_a_bad_family(run: Run) -> None:
    run.ok("db", "create", "shop")
    result = run("table", "create", "shop", "t", "--key", "k", "--family", "nofields")
    assert result.exit_code == 2
    assert "NAME=FIELD,FIELD" in result.stderr


# -- records ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv"])
@pytest.mark.parametrize(
    ("options", "kwargs"),
    [
        ((), {}),
        (("--from", "10", "--to", "20"), {"from_pk": 10, "to_pk": 20}),
        (("--fields", "qty,blob,doc"), {"fields": ["qty", "blob", "doc"]}),
        (
            ("--reverse", "--offset", "3", "--limit", "5"),
            {"reverse": True, "offset": 3, "limit": 5},
        ),
        (("--limit", "0"), {"limit": 0}),
    ],
)
def test_scan(
    run: Run, shop: merkle.Database, fmt: str, options: tuple[str, ...], kwargs: dict[str, Any]
) -> None:
    got = records(run.ok("scan", "shop", "orders", *options, "--format", fmt).stdout, fmt)
    want = list(shop.scan("orders", **kwargs))
    assert got == expected(want, fmt, ["order_id", *kwargs.get("fields", [])])


def test_scan_csv_header_lists_requested_fields(run: Run, shop: merkle.Database) -> None:
    # Orders 1 and 2 have no doc: the column is shown all the same.
    args = ("--fields", "qty,doc", "--from", "1", "--to", "2", "--format", "csv")
    out = run.ok("scan", "shop", "orders", *args).stdout
    assert out.splitlines()[0] == "order_id,qty,doc"
    # A field the table does not have is an error (it was silently an empty column).
    error = run.fails("scan", "shop", "orders", "--fields", "qty,nothing")
    assert "table shop.orders has no field 'nothing'; its fields: order_id, sku" in error


def test_scan_an_old_version(run: Run, conn: merkle.Connection, shop: merkle.Database) -> None:
    out = run.ok("scan", "shop", "orders", "--version", "1", "--from", "5", "--to", "6").stdout
    assert records(out, "jsonl") == [jsonable(order(5)), jsonable(order(6))]
    at = conn.history("shop")[1].time.isoformat()
    out = run.ok("scan", "shop", "orders", "--at", at, "--from", "6", "--to", "6").stdout
    assert records(out, "jsonl") == [jsonable(order(6))]
    line = run.fails("scan", "shop", "orders", "--version", "0")
    assert "(version 0) has no table 'orders'" in line  # created at version 1


def test_scan_defaults_to_jsonl_off_a_terminal(run: Run, shop: merkle.Database) -> None:
    out = run.ok("scan", "shop", "orders", "--limit", "2").stdout
    assert [json.loads(line)["order_id"] for line in out.splitlines()] == [0, 1]


def test_scan_table_format(run: Run, shop: merkle.Database) -> None:
    out = run.ok("scan", "shop", "orders", "--fields", "sku,qty", "--limit", "3", "-f", "table")
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["order_id", "sku", "qty"]
    assert [line.split() for line in lines[2:]] == [
        ["0", "sku-0", "0"],
        ["1", "sku-1", "1"],
        ["2", "sku-2", "2"],
    ]


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv"])
def test_get(run: Run, shop: merkle.Database, fmt: str) -> None:
    got = records(run.ok("get", "shop", "orders", "12", "3", "5", "--format", fmt).stdout, fmt)
    found = shop.get_records("orders", [12, 3, 5])
    assert got == expected([found[12], found[3], found[5]], fmt, ["order_id"])


def test_get_fields_and_version(run: Run, shop: merkle.Database) -> None:
    out = run.ok("get", "shop", "orders", "5", "6", "--fields", "qty", "--version", "1").stdout
    assert records(out, "jsonl") == [{"order_id": 5, "qty": 0}, {"order_id": 6, "qty": 1}]


def test_get_missing_keys_print_the_found_ones_then_fail(run: Run, shop: merkle.Database) -> None:
    result = run("get", "shop", "orders", "6", "7", "1000")
    assert result.exit_code == 1
    assert records(result.stdout, "jsonl") == [jsonable(order(7))]
    assert_one_error_line(result.stderr)
    assert "no record in shop.orders for key 6, 1000" in result.stderr


# -- keys of every codec ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codec", "keys", "arg", "hit"),
    [
        ("str", ["007", "7", "b"], "007", "007"),
        ("float", [0.5, 1.0, 2.5], "1", 1.0),
        ("bytes", [b"\x00", b"\x00\xff", b"a"], "0x00ff", b"\x00\xff"),
        (
            "timestamp",
            [START, START + timedelta(days=1)],
            "2026-01-01T01:00:00+01:00",
            START,
        ),
        ("tuple(int,str)", [(1, "a"), (1, "b"), (2, "a")], '[1, "b"]', (1, "b")),
        ("reverse(int)", [1, 2, 3], "2", 2),
    ],
)
def test_keys_are_parsed_by_the_codec(
    run: Run, conn: merkle.Connection, codec: str, keys: list[Any], arg: str, hit: Any
) -> None:
    db = conn.create_db("k").create_table("t", key="k", key_codec=codec)
    db.write("t", [{"k": key, "v": i} for i, key in enumerate(keys)]).commit()
    out = run.ok("get", "k", "t", arg).stdout
    assert records(out, "jsonl") == [jsonable({"k": hit, "v": keys.index(hit)})]
    # Every key as the output shows it can be pasted back, into get and into scan bounds.
    for row in records(run.ok("scan", "k", "t", "--format", "csv").stdout, "csv"):
        again = run.ok("get", "k", "t", row["k"], "--format", "csv").stdout
        assert records(again, "csv") == [row]
        bounded = run.ok("scan", "k", "t", "--from", row["k"], "--to", row["k"], "-f", "csv")
        assert records(bounded.stdout, "csv") == [row]


def test_keys_of_a_table_never_written(run: Run, conn: merkle.Connection) -> None:
    conn.create_db("k").create_table("t", key="k").commit()
    assert run.ok("scan", "k", "t", "--from", "a").stdout == ""
    assert run("get", "k", "t", "a").exit_code == 1


# -- compact -----------------------------------------------------------------------------


def test_compact(run: Run, conn: merkle.Connection, shop: merkle.Database) -> None:
    before = shop.describe_table("orders")
    assert before["patch"]["count"] > 0
    out = run.ok("compact", "shop", "orders", "--author", "ops").stdout
    assert out == "compacted table orders of database 'shop' (version 3)\n"
    head = conn.history("shop")[0]
    assert (head.message, head.author) == ("compact table orders", "ops")
    db = conn.open_db("shop")
    after = db.describe_table("orders")
    assert after["patch"]["count"] == 0
    assert after["tablets"] >= 1
    assert list(db.scan("orders")) == list(shop.scan("orders"))
    assert run.ok("compact", "shop").stdout == (
        "nothing to compact in shop (all tables): no pending batches\n"
    )
    assert conn.history("shop")[0].version == 3


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--lake", "bogus://x", "db", "list"), "unknown storage scheme 'bogus'"),
        (("db", "describe", "nope"), "no database 'nope'"),
        (("db", "drop", "nope"), "no live database 'nope'"),
        (("db", "log", "nope"), "database 'nope' does not exist"),
        (("db", "create", "shop"), "already exists"),
        (("db", "describe", "shop", "--version", "9"), "9"),
        (("table", "describe", "shop", "nope"), "has no table 'nope'"),
        (("table", "create", "shop", "orders", "--key", "k"), "already exists"),
        (("table", "create", "shop", "t", "--key", "k", "--key-codec", "uuid"), "uuid"),
        (("table", "create", "shop", "t", "--key", "k", "--branching-factor", "1"), ">= 3"),
        (("scan", "shop", "nope"), "has no table 'nope'"),
        (("scan", "nope", "orders"), "no database 'nope'"),
        (("scan", "shop", "orders", "--from", "ten"), "key 'ten' does not parse as key codec"),
        (("get", "shop", "orders", "1", "x"), "key 'x' does not parse as key codec 'int'"),
        (("scan", "shop", "orders", "--version", "1", "--at", "2026-01-01"), "not both"),
        (("compact", "shop", "nope"), "has no table 'nope'"),
    ],
)
def test_user_errors_are_one_line_with_status_1(
    run: Run, shop: merkle.Database, args: tuple[str, ...], message: str
) -> None:
    line = run.fails(*args, lake=args[0] != "--lake")
    assert message in line


def test_missing_lake(run: Run) -> None:
    line = run.fails("db", "list", lake=False)
    assert line == "error: no lake given: pass --lake URI or set MERKLE_LAKE"


@pytest.mark.parametrize(
    "args",
    [
        ("scan", "shop", "orders", "--format", "xml"),
        ("scan", "shop"),
        ("get", "shop", "orders"),
        ("nosuchcommand",),
        ("db", "log", "shop", "--limit", "0"),
        ("scan", "shop", "orders", "--at", "yesterday"),
        ("scan", "shop", "orders", "--fields", "a,,b"),
        ("db", "create", "x", "--metadata", "{nope"),
        ("--option", "novalue", "db", "list"),
    ],
)
def test_usage_errors_have_status_2(run: Run, args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.splitlines()[-1].startswith("Error: ")


@pytest.mark.s3
def test_an_s3_lake_with_store_options(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    run = Run(f"s3://{bucket}/lake")
    options = ("-o", f"endpoint_url={moto_endpoint}", "-o", "region_name=us-east-1")
    run.ok(*options, "db", "create", "shop")
    run.ok(*options, "table", "create", "shop", "t", "--key", "k")
    out = run.ok(*options, "db", "list", "--format", "json").stdout
    assert [row["name"] for row in json.loads(out)] == ["shop"]
    with merkle.connect(
        f"s3://{bucket}/lake", endpoint_url=moto_endpoint, region_name="us-east-1"
    ) as conn:
        assert conn.open_db("shop").list_tables() == ["t"]
    # Without the endpoint the bucket is not reachable: a one-line error, not a traceback.
    line = run.fails("-o", "endpoint_url=http://127.0.0.1:9", "-o", "max_attempts=1", "db", "list")
    assert line.startswith("error: ")
