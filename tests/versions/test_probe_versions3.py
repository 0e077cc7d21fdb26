"""Diff after a drop, clone roots, sync arguments and a source collection mid-push: probe fixes.

An adversarial probe found:

* ``merkle diff DB`` (and ``db.diff(db.version - 1)``) on a database dropped and
  created again said the live database "was dropped ...: create it again": the
  head's journal parent is the drop, which holds no data; such a head has no
  parent, as version 0 has none;
* ``create_db(name, root=<CID of a raw data block>)`` raised IntegrityError
  "malformed DAG-CBOR block", which reads as damage to the lake;
* ``merkle.sync`` given a lake URI string instead of a Connection raised a raw
  AttributeError;
* a history push failed with "version N ... was removed by retention" (a
  version nobody named) when a collection at the source trimmed a planned
  version mid-push, after committing part of the history;
* ``merkle.sync(..., version=N)`` of a drop entry said "pass the version to
  send" although the version was passed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import merkle
from merkle.blocks.cid import CID
from merkle.blocks.codec import iter_links
from merkle.errors import NotFoundError, UsageError


@pytest.fixture
def conn() -> Iterator[merkle.Connection]:
    with merkle.connect(f"memory://probe3-{uuid.uuid4().hex}") as c:
        yield c


# -- diff of a database created again after a drop ---------------------------------------


def _create_again(conn: merkle.Connection, how: str) -> None:
    """``s``: version 0 holds a table, 1 drops it, 2 creates it again (or clones onto it)."""
    conn.create_db("s").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    conn.create_db("other")
    conn.drop_db("s")
    if how == "create":
        conn.create_db("s")
    else:
        conn.create_db("s", root=conn.open_db("other"))


@pytest.mark.parametrize("how", ["create", "clone"])
def test_cli_diff_of_a_head_created_again_asks_for_v1(tmp_path: Path, how: str) -> None:
    from merkle.cli.main import cli

    uri = (tmp_path / "lake").as_uri()
    with merkle.connect(uri, create=True) as c:
        _create_again(c, how)
    result = CliRunner().invoke(cli, ["--lake", uri, "diff", "s"], env={"MERKLE_LAKE": None})
    assert result.exit_code == 1, result.output
    assert "was dropped" not in result.output
    assert "version 3 of 's' created the database again after its drop at version 2" in (
        result.output
    )
    assert "has no parent: name V1" in result.output
    named = CliRunner().invoke(
        cli, ["--lake", uri, "diff", "s", "1", "--stat"], env={"MERKLE_LAKE": None}
    )
    assert named.exit_code == 0, named.output  # across the drop, named: compared as named
    assert "dropped" in named.output


@pytest.mark.parametrize("how", ["create", "clone"])
def test_api_diff_against_the_drop_names_a_version_with_data(
    conn: merkle.Connection, how: str
) -> None:
    _create_again(conn, how)
    db = conn.open_db("s")
    with pytest.raises(NotFoundError) as err:
        db.diff(db.version - 1)
    text = str(err.value)
    assert "version 2 of database 's' is a drop" in text
    assert "version 3 created the database again after it, so it has no parent" in text
    assert "version 1 (the last before the drop)" in text
    assert "create it again" not in text
    assert db.diff(1).summary()["tables_dropped"] == ["t"]  # the version named works


# -- a clone root that is no database root --------------------------------------------------


def _raw_block(conn: merkle.Connection) -> str:
    db = conn.create_db("s").create_table("t", key="k")
    db = db.write("t", [{"k": i, "v": i} for i in range(10)]).commit().compact().commit()
    tablet = CID.parse(db.list_tablets("t")[0]["id"])
    return str(next(c for c in iter_links(conn.blocks.get_node(tablet)) if c.codec == 0x55))


def _plain_node(conn: merkle.Connection) -> str:
    return str(conn.blocks.put_node({"not": "a merkle node"}))


def _cid_v0(conn: merkle.Connection) -> str:
    return str(CID.from_bytes(b"\x12\x20" + bytes(range(32))))


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (_raw_block, "is a raw data block"),
        (_plain_node, "is a block with no merkle node type"),
        (_cid_v0, "is a block of codec 0x70"),
    ],
)
def test_a_clone_root_of_another_kind_of_block_is_a_usage_error(
    conn: merkle.Connection, make: Callable[[merkle.Connection], str], says: str
) -> None:
    root = make(conn)
    with pytest.raises(UsageError) as err:
        conn.create_db("x", root=root)
    assert f"root {root} {says}, not a database root" in str(err.value)
    assert conn.refs.head("x") is None


# -- sync arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize("side", ["src", "dst"])
@pytest.mark.parametrize("wrong", ["/tmp/some/lake", None, 3])
def test_sync_of_no_connection_is_a_usage_error(
    conn: merkle.Connection, side: str, wrong: Any
) -> None:
    conn.create_db("s")
    args = (wrong, conn) if side == "src" else (conn, wrong)
    with pytest.raises(UsageError) as err:
        merkle.sync(*args, "s", as_name="t")
    text = str(err.value)
    assert f"sync({side}=) takes a Connection" in text
    assert "merkle.connect(" in text
    if isinstance(wrong, str):
        assert f"merkle.connect({wrong!r})" in text


@pytest.mark.parametrize("again", [False, True])
def test_sync_of_a_drop_version_says_it_is_a_drop(
    conn: merkle.Connection, tmp_path: Path, again: bool
) -> None:
    conn.create_db("s").create_table("t", key="k").commit()  # versions 0, 1
    conn.drop_db("s")  # version 2
    if again:
        conn.create_db("s")  # version 3: the drop is in the middle
    with merkle.connect(f"memory://probe3-{uuid.uuid4().hex}") as other:
        with pytest.raises(NotFoundError) as err:
            merkle.sync(conn, other, "s", version=2)
        assert other.refs.head("s") is None
    text = str(err.value)
    assert "version 2 of database 's' in" in text
    assert "is a drop" in text
    assert "pass the version to send" not in text
    assert "e.g. version 1 (the last before the drop)" in text


# -- a collection at the source while a history push runs ------------------------------------


@pytest.mark.parametrize("options", [{}, {"version": 6, "history": True}])
def test_a_push_replans_when_the_source_trims_a_planned_version(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with merkle.connect(a) as src, merkle.connect(b) as dst:
        db = src.create_db("s").create_table("t", key="k").commit()
        for i in range(5):
            db = db.write("t", [{"k": i, "v": i}]).commit()  # versions 2..6
        first_root = src.open_db("s", version=0).root
        ran: list[int] = []

        def progress(_: int) -> None:
            if not ran:  # a collection at the source while version 0 is being copied
                ran.append(1)
                with merkle.connect(a) as other:
                    merkle.gc(other, keep_versions=2, grace="0s")

        report = merkle.sync(src, dst, "s", progress=progress, **options)
        assert ran
        kept = [e for e in reversed(src.history("s"))]
        assert [e.version for e in kept] == [5, 6]
        # What a sync started after the collection sends on a destination at version 0.
        assert report.source_versions == [0, 5, 6]
        got = list(reversed(dst.history("s")))
        assert [e.root for e in got] == [first_root] + [e.root for e in kept]
        assert [e.meta["synced_from"]["version"] for e in got] == [0, 5, 6]
        assert sorted(r["k"] for r in dst.open_db("s").scan("t")) == list(range(5))
        assert merkle.sync(src, dst, "s").up_to_date
