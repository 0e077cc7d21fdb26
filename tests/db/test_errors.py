"""Bad input: a clear ``merkle.errors`` exception that names the thing, and nothing stored.

Each case runs on a settled lake (the connection that built it is closed,
so no lease is renewed in the background), snapshots every object of the
lake, makes the bad call through a fresh connection, checks the exception's
type and message, and compares the snapshot afterwards: the journal and the
set of stored objects are exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import Lake, make_lake

import merkle
from merkle.errors import MerkleError, NotFoundError, UsageError

from .conftest import Connect
from .helpers import snapshot


def _settle(lake: Lake) -> Lake:
    """Build database 'shop' at version 2 (tables 't' int keys, 's' str keys) and 'other'.

    The connection is closed afterwards, which gives its writer lease up: no
    background thread touches the lake while a test compares snapshots.
    """
    with merkle.connect(lake.uri, **lake.options) as conn:
        db = conn.create_db("shop", metadata={"owner": "ops"})
        db = db.create_table("t", key="k", key_codec="int", tablet_size_limit=4, patch_limit=3)
        db = db.create_table("s", key="name")
        db = db.write("t", [{"k": i, "v": i} for i in range(10)]).commit()
        db.write("s", [{"name": "a"}]).write("t", [{"k": 100}]).commit()
        conn.create_db("other")
    return lake


@pytest.fixture(scope="module", params=["memory", "file", pytest.param("s3", marks=pytest.mark.s3)])
def settled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Lake:
    """One settled lake per backend, shared by the cases: none of them may change it."""
    return _settle(make_lake(request.param, tmp_path_factory.mktemp("errors"), request))


def _shop(conn: merkle.Connection) -> merkle.Database:
    return conn.open_db("shop")


Case = tuple[Callable[[merkle.Connection], Any], type[MerkleError], list[str]]


def _strings(offsets: list[int], data: bytes) -> pa.Array:
    """A string array made from raw buffers, as a reader of foreign data may hand one over."""
    buffers = [None, pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, buffers)


def _write_arrow(conn: merkle.Connection, column: pa.Array) -> Any:
    rows = pa.table({"k": pa.array(range(100, 100 + len(column)), pa.int64()), "v": column})
    return _shop(conn).write("t", rows).commit()


BEFORE_FIRST = datetime(2000, 1, 1, 12, 0)

CASES: dict[str, Case] = {
    # Unknown databases.
    "open unknown db": (lambda c: c.open_db("nope"), NotFoundError, ["'nope'"]),
    "open unknown db at version": (
        lambda c: c.open_db("nope", version=0),
        NotFoundError,
        ["'nope'"],
    ),
    "open unknown db at time": (
        lambda c: c.open_db("nope", at=datetime.now(UTC)),
        NotFoundError,
        ["'nope'"],
    ),
    "history of unknown db": (lambda c: c.history("nope"), NotFoundError, ["'nope'"]),
    "drop unknown db": (lambda c: c.drop_db("nope"), NotFoundError, ["'nope'"]),
    "clone unknown root": (
        lambda c: c.create_db(
            "copy", root="bafyr4ihiu3bqhoz3f2kntwasrhra5mdmszgdirtrrublxxyilckdw4443m"
        ),
        NotFoundError,
        ["bafyr4ihiu3bqhoz3f2kntwasrhra5mdmszgdirtrrublxxyilckdw4443m"],
    ),
    # Versions that do not exist.
    "version past the head": (
        lambda c: c.open_db("shop", version=3),
        NotFoundError,
        ["'shop'", "3"],
    ),
    "version far past the head": (
        lambda c: c.open_db("shop", version=10**6),
        NotFoundError,
        ["'shop'", "1000000"],
    ),
    "negative version": (lambda c: c.open_db("shop", version=-1), UsageError, ["version", "-1"]),
    "version and at": (
        lambda c: c.open_db("shop", version=1, at=datetime.now(UTC)),
        UsageError,
        ["version", "at"],
    ),
    "at before the first commit (naive)": (
        lambda c: c.open_db("shop", at=BEFORE_FIRST),
        NotFoundError,
        ["'shop'", "2000-01-01"],
    ),
    "at before the first commit (aware)": (
        lambda c: c.open_db("shop", at=c.history("shop")[-1].time - timedelta(microseconds=1)),
        NotFoundError,
        ["'shop'"],
    ),
    "at not a datetime": (
        lambda c: c.open_db("shop", at="yesterday"),  # type: ignore[arg-type]
        UsageError,
        ["at"],
    ),
    # Things that exist already.
    "create db that exists": (lambda c: c.create_db("shop"), UsageError, ["'shop'", "exists"]),
    "create db that exists, with metadata": (
        lambda c: c.create_db("other", metadata={"a": 1}),
        UsageError,
        ["'other'", "exists"],
    ),
    "clone onto a db that exists": (
        lambda c: c.create_db("other", root=_shop(c)),
        UsageError,
        ["'other'", "exists"],
    ),
    "create table that exists": (
        lambda c: _shop(c).create_table("t", key="k"),
        UsageError,
        ["'t'", "exists"],
    ),
    "create table created in the same transaction": (
        lambda c: _shop(c).create_table("u", key="k").create_table("u", key="id"),
        UsageError,
        ["'u'", "exists"],
    ),
    # Unknown tables, through every call that names one.
    "scan unknown table": (lambda c: list(_shop(c).scan("nope")), NotFoundError, ["'nope'"]),
    "get_records unknown table": (
        lambda c: _shop(c).get_records("nope", [1]),
        NotFoundError,
        ["'nope'"],
    ),
    "to_arrow unknown table": (lambda c: _shop(c).to_arrow("nope"), NotFoundError, ["'nope'"]),
    "write unknown table": (
        lambda c: _shop(c).write("nope", [{"k": 1}]),
        NotFoundError,
        ["'nope'"],
    ),
    "delete unknown table": (lambda c: _shop(c).delete("nope", [1]), NotFoundError, ["'nope'"]),
    "describe unknown table": (
        lambda c: _shop(c).describe_table("nope"),
        NotFoundError,
        ["'nope'"],
    ),
    "drop unknown table": (lambda c: _shop(c).drop_table("nope"), NotFoundError, ["'nope'"]),
    "alter meta of unknown table": (
        lambda c: _shop(c).alter_table_meta("nope", lambda m: m),
        NotFoundError,
        ["'nope'"],
    ),
    "alter families of unknown table": (
        lambda c: _shop(c).alter_families("nope", {}),
        NotFoundError,
        ["'nope'"],
    ),
    "list tablets of unknown table": (
        lambda c: _shop(c).list_tablets("nope"),
        NotFoundError,
        ["'nope'"],
    ),
    "build unknown table": (
        lambda c: _shop(c).build_table("nope", []),
        NotFoundError,
        ["'nope'"],
    ),
    "table dropped in the transaction": (
        lambda c: _shop(c).drop_table("t").write("t", [{"k": 1}]),
        NotFoundError,
        ["'t'"],
    ),
    "table of a version before it existed": (
        lambda c: list(c.open_db("shop", version=0).scan("t")),
        NotFoundError,
        ["'t'"],
    ),
    # Records without their key field.
    "record without its key field": (
        lambda c: _shop(c).write("t", [{"k": 1}, {"v": 2}]),
        UsageError,
        ["'k'", "'t'"],
    ),
    "record with a None key": (
        lambda c: _shop(c).write("t", [{"k": None, "v": 2}]),
        UsageError,
        ["'k'", "'t'"],
    ),
    "arrow data without the key column": (
        lambda c: _shop(c).write("t", pa.table({"v": [1, 2]})),
        UsageError,
        ["'k'", "'t'"],
    ),
    "arrow key column with a null": (
        lambda c: _shop(c).write("t", pa.table({"k": pa.array([1, None], pa.int64())})),
        UsageError,
        ["'k'"],
    ),
    "mapping whose record disagrees with its key": (
        lambda c: _shop(c).write("t", {1: {"k": 2}}),
        UsageError,
        ["k=2"],
    ),
    "not records at all": (lambda c: _shop(c).write("t", "k=1"), UsageError, ["'t'"]),
    # Keys of the wrong type.
    "str key in an int table": (
        lambda c: _shop(c).write("t", [{"k": "seven"}]),
        UsageError,
        ["'seven'", "int"],
    ),
    "wrong key type after good ones": (
        lambda c: _shop(c).write("t", [{"k": 1}, {"k": 2.5}]),
        UsageError,
        ["2.5", "int"],
    ),
    "float key in a str table (inferred codec)": (
        lambda c: _shop(c).write("s", [{"name": 1.5}]),
        UsageError,
        ["1.5", "str"],
    ),
    "bool key in an int table": (
        lambda c: _shop(c).write("t", [{"k": True}]),
        UsageError,
        ["True"],
    ),
    "arrow key column of the wrong type": (
        lambda c: _shop(c).write("t", pa.table({"k": ["a", "b"]})),
        UsageError,
        ["'k'", "string", "int"],
    ),
    "delete with a wrong key type": (
        lambda c: _shop(c).delete("t", ["x"]),
        UsageError,
        ["'x'", "int"],
    ),
    "get_records with a wrong key type": (
        lambda c: _shop(c).get_records("t", [b"x"]),
        UsageError,
        ["int"],
    ),
    "scan bound of a wrong type": (
        lambda c: list(_shop(c).scan("t", from_pk="a")),
        UsageError,
        ["'a'", "int"],
    ),
    # Arrow rows that are not valid Arrow data: stored, they would fail every read.
    "Arrow strings that are not UTF-8": (
        lambda c: _write_arrow(c, _strings([0, 1, 3], b"a\xff\xfe")),
        UsageError,
        ["'v'", "UTF8", "binary"],
    ),
    "Arrow string offsets out of order": (
        lambda c: _write_arrow(c, _strings([0, 3, 1], b"abc")),
        UsageError,
        ["'v'", "nothing was written"],
    ),
    # Bad table definitions.
    "unknown key codec": (
        lambda c: _shop(c).create_table("u", key="k", key_codec="uuid"),
        UsageError,
        ["uuid"],
    ),
    "bad tablet size limit": (
        lambda c: _shop(c).create_table("u", key="k", tablet_size_limit=0),
        UsageError,
        ["tablet_size_limit"],
    ),
    "key field in a family": (
        lambda c: _shop(c).create_table("u", key="k", families={"f": {"k"}}),
        UsageError,
        ["'k'"],
    ),
    "metadata that cannot be stored": (
        lambda c: _shop(c).alter_db_meta(lambda m: {**m, "x": object()}),
        UsageError,
        ["metadata", "'shop'"],
    ),
    "unknown tablet": (
        lambda c: list(
            _shop(c).read_tablet("bafkr4ihkr4ld3m4gqkjf4reryxsy2s5tkbxprqkow6fin2iiyvreuzzab4")
        ),
        NotFoundError,
        ["bafkr4ihkr4ld3m4gqkjf4reryxsy2s5tkbxprqkow6fin2iiyvreuzzab4"],
    ),
    # Found by an adversarial run: errors that were Python's or Arrow's own.
    "create table with no key": (
        lambda c: _shop(c).create_table("new", key=None),  # type: ignore[arg-type]
        UsageError,
        ["key of table 'new'", "None"],
    ),
    "to_batches filter on a missing field": (
        lambda c: _shop(c).to_batches("t", filter=pc.field("zz") == 1).read_all(),
        UsageError,
        ["filter", "zz"],
    ),
    "to_batches filter that is no condition": (
        lambda c: _shop(c).to_batches("t", filter=pc.field("v")).read_all(),
        UsageError,
        ["filter", "bool"],
    ),
    "connect with an unknown hash": (
        lambda c: merkle.connect(c.store.uri, hash="md5"),
        UsageError,
        ["hash='md5'", "blake3"],
    ),
}


XFAIL: dict[str, pytest.MarkDecorator] = {}  # cases that show a known bug


@pytest.mark.parametrize("case", [pytest.param(name, marks=XFAIL.get(name, ())) for name in CASES])
def test_bad_input_is_a_clear_error_and_changes_nothing(
    settled: Lake, connect: Connect, case: str
) -> None:
    call, error, fragments = CASES[case]
    conn = connect(settled)
    before = snapshot(conn.store)
    with pytest.raises(error) as raised:
        call(conn)
    message = str(raised.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    after = snapshot(conn.store)
    assert after.journal == before.journal
    assert after == before  # every object, blocks included


def test_a_failed_call_leaves_the_value_usable(lake: Lake, connect: Connect) -> None:
    """The value a failed call was made on is unchanged: it still commits what it held."""
    conn = connect(_settle(lake))
    db = conn.open_db("shop").write("t", [{"k": 50, "v": 5000}])
    with pytest.raises(UsageError):
        db.write("t", [{"k": 51}, {"v": "no key"}])
    with pytest.raises(UsageError):
        db.write("t", [{"k": "wrong"}])
    with pytest.raises(NotFoundError):
        db.delete("nope", [1])
    committed = db.commit()
    assert committed.version == 3
    assert committed.get_records("t", [50, 51]) == {50: {"k": 50, "v": 5000}}
    untouched = conn.open_db("shop", version=2)
    assert untouched.commit() is untouched


def test_errors_inherit_the_matching_builtins() -> None:
    assert issubclass(NotFoundError, KeyError)
    assert issubclass(UsageError, ValueError)
    assert issubclass(NotFoundError, merkle.errors.MerkleError)


def test_an_unknown_hash_makes_no_lake(tmp_path: Any) -> None:
    """A new lake with an unknown hash was created with it and could never be opened."""
    lake = tmp_path / "lake"
    with pytest.raises(UsageError, match="hash='md5'"):
        merkle.connect(str(lake), hash="md5")
    assert not (lake / "config").exists()
    with merkle.connect(str(lake)) as conn:
        assert conn.create_db("shop").name == "shop"
