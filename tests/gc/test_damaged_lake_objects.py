"""Damaged lake objects besides blocks and journal gaps: each is named, with a way out.

Before: a ``gc/policy``, ``config`` or ``gc/reports/*`` object whose bytes did not
decode gave an anonymous "malformed DAG-CBOR block" error, and ``set_retention``
could not replace a damaged policy (every collection of the lake was stuck). One
database's damaged head journal entry made ``merkle db list`` fail for the whole
lake, and the advice ("remove the database's damaged history") had no command:
``drop_db`` and ``conn.refs.trim`` refused with the same error. And ``merkle.verify``
of a lake whose directory was deleted in use reported a healthy, empty lake.
doc/operations.md ("Damaged lake objects") describes every way out tested here.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import Lake
from gc_helpers import connect

import merkle
from merkle.blocks.codec import encode_node
from merkle.cli.main import cli
from merkle.errors import IntegrityError, NotFoundError, StorageError
from merkle.gc import get_policy, load_reports, set_retention
from merkle.gc.policy import POLICY_KEY, PolicyDamagedError
from merkle.gc.report import REPORT_PREFIX
from merkle.refs import JournalDamagedError, JournalEntryDamagedError
from merkle.refs.entry import CONFIG_KEY, entry_digest, entry_key
from merkle.storage.file import FileStore

#: Bytes that do not decode (a torn object).
TORN = b"\xa5av\x01"


def run(lake: Lake, *args: str) -> Result:
    """``merkle --lake LAKE ARGS`` in-process (stderr apart from stdout)."""
    options = [arg for key, value in lake.options.items() for arg in ("-o", f"{key}={value}")]
    return CliRunner().invoke(cli, ["--lake", lake.uri, *options, *args], catch_exceptions=False)


def one_error_line(result: Result) -> str:
    """The one ``error:`` line a failed command printed on stderr."""
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def shop(lake: Lake) -> Iterator[merkle.Connection]:
    """A lake with database 'shop' at version 4: version k holds rows 0..k-1."""
    with connect(lake) as conn:
        db = conn.create_db("shop").create_table("t", key="id")
        for i in range(4):
            db = db.write("t", [{"id": i}]).commit()
        assert db.version == 4
        yield conn


def cli_lake(lake: Lake) -> None:
    if lake.kind == "memory":
        pytest.skip("the command line opens the lake by its URI: a memory lake is not shared")


# -- the GC policy ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [TORN, encode_node({"type": "merkle/gc-policy", "v": 1}), encode_node([1, 2])],
    ids=["torn", "no-fields", "not-a-map"],
)
def test_a_damaged_policy_stops_gc_naming_the_object_and_the_way_out(
    shop: merkle.Connection, raw: bytes
) -> None:
    set_retention(shop, keep_versions=2)
    shop.store.put(POLICY_KEY, raw)
    for call in (lambda: merkle.gc(shop, keep_versions=2), lambda: get_policy(shop)):
        with pytest.raises(PolicyDamagedError, match="'gc/policy'") as caught:
            call()
        assert "set_retention" in str(caught.value), caught.value
    assert len(shop.history("shop")) == 5, "the collection trimmed nothing"


def test_set_retention_replaces_a_damaged_policy_and_gc_runs_again(
    shop: merkle.Connection,
) -> None:
    set_retention(shop, keep_versions=5, db="shop", grace="2h")
    shop.store.put(POLICY_KEY, TORN)
    policy = set_retention(shop, keep_versions=2)
    # What the damaged policy held is lost: the override and the grace are the defaults.
    assert policy.default.keep_versions == 2
    assert policy.databases == {}
    assert policy.grace.total_seconds() == 3600
    assert get_policy(shop) == policy
    report = merkle.gc(shop)
    assert [e.version for e in shop.history("shop")] == [4, 3]
    assert report.databases["shop"].versions_trimmed == 3


def test_a_policy_of_a_newer_format_is_not_replaced(shop: merkle.Connection) -> None:
    newer = encode_node({"type": "merkle/gc-policy", "v": 99})
    shop.store.put(POLICY_KEY, newer)
    with pytest.raises(IntegrityError, match="upgrade merkle-db") as caught:
        set_retention(shop, keep_versions=2)
    assert not isinstance(caught.value, PolicyDamagedError)
    assert shop.store.get(POLICY_KEY) == newer


def test_merkle_gc_names_a_damaged_policy_on_its_one_line(
    lake: Lake, shop: merkle.Connection
) -> None:
    cli_lake(lake)
    shop.store.put(POLICY_KEY, TORN)
    line = one_error_line(run(lake, "gc", "--keep-versions", "2"))
    assert "'gc/policy'" in line
    assert "is damaged" in line
    assert "set_retention" in line


# -- the lake config and GC reports ----------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"xx", encode_node({"type": "merkle/gc-policy", "v": 1, "hash": "blake3"})],
    ids=["torn", "another-node"],
)
def test_a_damaged_config_is_named_with_the_way_out(
    lake: Lake, shop: merkle.Connection, raw: bytes
) -> None:
    shop.store.put(CONFIG_KEY, raw)
    with pytest.raises(
        IntegrityError, match=r"settings object 'config' in .* is damaged"
    ) as caught:
        connect(lake)
    assert "hash=" in str(caught.value), caught.value
    if lake.kind != "memory":
        line = one_error_line(run(lake, "db", "list"))
        assert "'config'" in line
        assert "is damaged" in line


@pytest.mark.parametrize("made_with", ["blake3", "sha2-256"])
def test_a_config_written_again_with_the_lakes_hash_opens_the_lake(
    lake: Lake, made_with: str
) -> None:
    """The documented way out: delete the object, connect with the hash the block names
    show (bafyr4i/bafkr4i: blake3; bafyrei/bafkrei: sha2-256), run verify."""
    with connect(lake, hash=made_with) as conn:
        conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
        names = {info.key.split("/")[1][:7] for info in conn.store.list("blocks/")}
        shown = {"bafyr4i", "bafkr4i"} if made_with == "blake3" else {"bafyrei", "bafkrei"}
        assert names <= shown
        conn.store.put(CONFIG_KEY, b"xx")
        conn.store.delete(CONFIG_KEY)
    with connect(lake, hash=made_with) as conn:
        assert merkle.verify(conn).ok
        assert conn.open_db("shop").to_arrow("t").num_rows == 1


def test_a_damaged_report_is_named_and_deleting_it_is_the_way_out(
    shop: merkle.Connection,
) -> None:
    merkle.gc(shop)
    merkle.gc(shop)
    first, _ = [info.key for info in shop.store.list(REPORT_PREFIX)]
    shop.store.put(first, b"xx")
    with pytest.raises(IntegrityError, match=f"GC report object '{first}' is damaged"):
        load_reports(shop.store)
    shop.store.put(first, encode_node({"type": "merkle/gc-policy", "v": 1}))
    with pytest.raises(IntegrityError, match=f"'{first}' is damaged: it is not a"):
        load_reports(shop.store)
    merkle.gc(shop)  # a collection neither reads nor trips on it
    shop.store.delete(first)
    assert len(load_reports(shop.store)) == 2


# -- a damaged head journal entry --------------------------------------------------------------


@pytest.fixture
def damaged(lake: Lake, shop: merkle.Connection) -> Iterator[merkle.Connection]:
    """A new connection to 'shop' as above, its head entry (version 4) torn, and to a
    healthy 'good' (the connection that wrote the head would serve it from memory)."""
    shop.create_db("good").create_table("t", key="id").write("t", [{"id": 7}]).commit()
    shop.store.put(entry_key("shop", 4), TORN)
    with connect(lake) as fresh:
        yield fresh


def test_a_damaged_head_names_the_ways_out(damaged: merkle.Connection) -> None:
    with pytest.raises(JournalEntryDamagedError) as caught:
        damaged.open_db("shop")
    error = caught.value
    assert (error.db, error.version, error.key) == ("shop", 4, entry_key("shop", 4))
    assert "conn.refs.trim('shop', 5)" in str(error)
    assert "merkle db drop shop" in str(error)
    assert "damaged history" not in str(error), "advice with no command"


def test_listing_databases_lists_the_others_beside_a_damaged_head(
    lake: Lake, damaged: merkle.Connection
) -> None:
    assert damaged.list_dbs() == ["good", "shop"]
    if lake.kind == "memory":
        return
    result = run(lake, "db", "list", "-f", "csv")
    assert result.stdout.splitlines()[0] == "name,version,time"
    assert result.stdout.splitlines()[1] == "good,1," + damaged.history("good")[0].time.isoformat()
    assert result.stdout.splitlines()[2] == "shop,,"
    line = one_error_line(result)
    assert "'shop', listed without a version" in line
    assert "refs/shop/" in line


def test_an_earlier_version_below_a_damaged_head_can_be_read_and_cloned(
    damaged: merkle.Connection,
) -> None:
    assert damaged.open_db("shop", version=3).to_arrow("t").num_rows == 3
    damaged.create_db("rescued", root=damaged.open_db("shop", version=3))
    assert damaged.open_db("rescued").to_arrow("t").num_rows == 3


def test_dropping_then_trimming_removes_a_damaged_head_and_gc_runs_again(
    damaged: merkle.Connection,
) -> None:
    with pytest.raises(JournalDamagedError, match="'shop'"):
        merkle.gc(damaged)
    dropped = damaged.drop_db("shop")
    assert dropped.version == 5
    assert dropped.dropped
    assert dropped.prev == entry_digest(TORN), "the drop chains to the bytes it covers"
    assert dropped.time >= damaged.refs.get("shop", 3).time
    assert damaged.list_dbs() == ["good"]
    assert damaged.refs.trim("shop", 5) == 5
    assert not damaged.store.exists(entry_key("shop", 4))
    merkle.gc(damaged, grace="0s")
    assert merkle.verify(damaged).ok
    # The database can be made again, its numbering continued.
    assert damaged.create_db("shop").version == 6


def test_a_dropped_database_is_restored_from_the_version_below_its_damaged_head(
    damaged: merkle.Connection,
) -> None:
    damaged.drop_db("shop")
    restored = damaged.create_db("shop", root=damaged.open_db("shop", version=3))
    assert restored.version == 6
    damaged.refs.trim("shop", 5)
    merkle.gc(damaged, grace="0s")
    assert damaged.open_db("shop").to_arrow("t").num_rows == 3
    assert merkle.verify(damaged).ok


def test_trim_works_below_a_damaged_head_and_never_removes_it(
    damaged: merkle.Connection,
) -> None:
    assert damaged.refs.trim("shop", 9) == 4
    assert damaged.store.exists(entry_key("shop", 4))
    assert damaged.refs.oldest_version("good") == 0
    with pytest.raises(JournalEntryDamagedError):
        damaged.open_db("shop")


def test_a_damaged_entry_below_the_head_names_the_trim_that_removes_it(
    shop: merkle.Connection,
) -> None:
    shop.store.put(entry_key("shop", 2), TORN)
    with pytest.raises(JournalEntryDamagedError, match=r"conn\.refs\.trim\('shop', 3\)"):
        shop.open_db("shop", version=2)
    with pytest.raises(JournalDamagedError):
        merkle.gc(shop)
    shop.refs.trim("shop", 3)
    merkle.gc(shop)
    assert shop.open_db("shop").to_arrow("t").num_rows == 4


# -- a lake deleted while in use ------------------------------------------------------------


def test_verify_of_a_lake_directory_deleted_in_use_says_it_is_gone(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    with merkle.connect(root.as_uri()) as conn:
        conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
        shutil.rmtree(root)
        for call in (merkle.verify, merkle.gc):
            with pytest.raises(StorageError, match="is gone"):
                call(conn)
    assert not root.exists()


def test_verify_of_a_lake_whose_objects_were_all_deleted_says_it_is_gone(
    shop: merkle.Connection,
) -> None:
    shop.store.delete_many([info.key for info in shop.store.list()])
    with pytest.raises(NotFoundError, match="is gone"):
        merkle.verify(shop)


@pytest.mark.parametrize("dry_run", [False, True])
def test_gc_of_a_lake_whose_objects_were_all_deleted_says_it_is_gone_and_writes_nothing(
    shop: merkle.Connection, dry_run: bool
) -> None:
    """On S3 (or a directory emptied in place) it wrote a clock, a lock and a report
    into the deleted lake and reported a healthy collection."""
    shop.store.delete_many([info.key for info in shop.store.list()])
    with pytest.raises(NotFoundError, match="is gone"):
        merkle.gc(shop, dry_run=dry_run, grace="0s")
    assert list(shop.store.list()) == []


def test_gc_of_an_empty_lake_runs(lake: Lake) -> None:
    with connect(lake) as conn:
        report = merkle.gc(conn, grace="0s")
    assert report.blocks_freed == 0
    assert report.databases == {}


def test_an_empty_lake_verifies_as_healthy(lake: Lake) -> None:
    with connect(lake) as conn:
        report = merkle.verify(conn)
    assert report.ok
    assert report.versions_checked == 0


def test_a_file_store_listing_of_its_deleted_directory_is_an_error(tmp_path: Path) -> None:
    root = tmp_path / "lake"
    fresh = FileStore(str(root))  # not made yet: listings are empty, as a new lake's
    assert list(fresh.list()) == []
    assert fresh.list_prefixes("refs/") == []
    fresh.put("refs/shop/x", b"1")
    shutil.rmtree(root)
    with pytest.raises(StorageError, match="is gone"):
        list(fresh.list("refs/"))
    with pytest.raises(StorageError, match="is gone"):
        fresh.list_prefixes("refs/")
    assert not root.exists()
