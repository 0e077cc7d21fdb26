"""Concurrent transactions: replay on a moved head, conflicts that cannot replay, races.

Two kinds of concurrency: transactions of two connections in one process,
interleaved in a chosen order (every backend, fast), and real processes
started together behind a barrier, committing to one lake (file and S3,
marked slow). After a race the journal must be one chain, versions 0..N
without gaps, and every committed write must be there.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import Lake

import merkle
from merkle.errors import ConflictError

from .conftest import Connect
from .helpers import all_tables, full_scan, snapshot
from .workers import commit_disjoint, run_one, run_steps, spawned


def _setup(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("shop").create_table("t", key="k", schema_free=True)
    db = db.create_table("u", key="k", schema_free=True)
    return db.write("t", [{"k": i, "v": i} for i in range(5)]).commit()


def _journal_of(conn: merkle.Connection, db: str = "shop") -> dict[str, bytes]:
    return {k: v for k, v in snapshot(conn.store).journal.items() if k.startswith(f"refs/{db}/0")}


# -- a concurrent drop_table ---------------------------------------------------------------

Change = Callable[[merkle.Database], merkle.Database]

CHANGES_TO_T: dict[str, Change] = {
    "write": lambda db: db.write("t", [{"k": 100}]),
    "delete": lambda db: db.delete("t", [1]),
    "alter_table_meta": lambda db: db.alter_table_meta("t", lambda _: {"x": 1}),
    "alter_families": lambda db: db.alter_families("t", {"f": {"v"}}),
    "drop_table": lambda db: db.drop_table("t"),
    "write_other_then_t": lambda db: db.write("u", [{"k": 1}]).write("t", [{"k": 7}]),
}


@pytest.mark.parametrize("change", list(CHANGES_TO_T))
@pytest.mark.parametrize("recreate", [False, True], ids=["dropped", "dropped-and-recreated"])
def test_concurrent_drop_table_is_a_conflict_naming_the_table(
    lake: Lake, connect: Connect, change: str, recreate: bool
) -> None:
    first, second = connect(lake), connect(lake)
    _setup(first)
    mine = CHANGES_TO_T[change](first.open_db("shop"))
    theirs = second.open_db("shop").drop_table("t")
    if recreate:
        theirs = theirs.create_table("t", key="k").write("t", [{"k": 1, "new": True}])
    theirs = theirs.commit()
    journal = _journal_of(second)
    with pytest.raises(ConflictError, match="'t'"):
        mine.commit()
    # The failed commit added no version; the other transaction's result stands.
    assert _journal_of(second) == journal
    head = connect(lake).open_db("shop")
    assert head.version == theirs.version
    assert all_tables(head) == all_tables(theirs)


def test_concurrent_drop_of_another_table_replays(lake: Lake, connect: Connect) -> None:
    first, second = connect(lake), connect(lake)
    _setup(first)
    mine = first.open_db("shop").write("t", [{"k": 100}])
    second.open_db("shop").drop_table("u").commit()
    committed = mine.commit()
    assert committed.version == 3
    assert committed.list_tables() == ["t"]
    assert [r["k"] for r in full_scan(connect(lake).open_db("shop"), "t")] == [0, 1, 2, 3, 4, 100]


def test_concurrent_create_of_the_same_table_is_a_conflict(lake: Lake, connect: Connect) -> None:
    first, second = connect(lake), connect(lake)
    _setup(first)
    mine = first.open_db("shop").create_table("new", key="k").write("new", [{"k": 1}])
    second.open_db("shop").create_table("new", key="id").commit()
    with pytest.raises(ConflictError, match="'new'"):
        mine.commit()
    assert connect(lake).open_db("shop").describe_table("new")["key"] == "id"


# -- commit(rebase=False) -------------------------------------------------------------------

CONCURRENT: dict[str, Change] = {
    "same table": lambda db: db.write("t", [{"k": 50}]),
    "other table": lambda db: db.write("u", [{"k": 1}]),
    "new table": lambda db: db.create_table("x", key="k"),
    "metadata only": lambda db: db.alter_db_meta(lambda _: {"m": 1}),
    "drop other table": lambda db: db.drop_table("u"),
}


@pytest.mark.parametrize("concurrent", list(CONCURRENT))
def test_commit_without_rebase_fails_on_any_concurrent_commit(
    lake: Lake, connect: Connect, concurrent: str
) -> None:
    first, second = connect(lake), connect(lake)
    _setup(first)
    mine = first.open_db("shop").write("t", [{"k": 9, "mine": True}])
    theirs = CONCURRENT[concurrent](second.open_db("shop")).commit()
    journal = _journal_of(second)
    with pytest.raises(ConflictError, match="'shop'") as raised:
        mine.commit(rebase=False)
    assert "rebase" in str(raised.value)
    assert _journal_of(second) == journal
    assert all_tables(connect(lake).open_db("shop")) == all_tables(theirs)
    # With replay (the default) the same value commits on top of theirs.
    committed = mine.commit()
    assert committed.version == theirs.version + 1
    assert committed.get_records("t", [9]) == {9: {"k": 9, "mine": True}}


def test_commit_without_rebase_succeeds_when_nothing_moved(conn: merkle.Connection) -> None:
    db = _setup(conn)
    committed = db.write("t", [{"k": 9}]).commit(rebase=False)
    assert committed.version == db.version + 1


# -- the same key written by two transactions -------------------------------------------------


@pytest.mark.parametrize("order", ["a-then-b", "b-then-a"])
def test_concurrent_writes_to_one_key_the_later_commit_wins(
    lake: Lake, connect: Connect, order: str
) -> None:
    first, second = connect(lake), connect(lake)
    _setup(first)
    a = first.open_db("shop").write("t", [{"k": 1, "by": "a"}, {"k": 10, "only": "a"}])
    b = second.open_db("shop").write("t", {1: {"by": "b"}, 11: {"only": "b"}}).delete("t", [2])
    earlier, later = (a, b) if order == "a-then-b" else (b, a)
    v1 = earlier.commit()
    v2 = later.commit()
    assert v2.version == v1.version + 1
    winner = "b" if order == "a-then-b" else "a"
    head = connect(lake).open_db("shop")
    assert head.get_records("t", [1]) == {1: {"k": 1, "by": winner}}
    # Everything else of both transactions is there.
    assert head.get_records("t", [2, 10, 11]) == {
        10: {"k": 10, "only": "a"},
        11: {"k": 11, "only": "b"},
    }
    # And the earlier commit's version still shows its own value.
    loser = "a" if winner == "b" else "b"
    assert connect(lake).open_db("shop", version=v1.version).get_records("t", [1]) == {
        1: {"k": 1, "by": loser}
    }


def test_write_then_concurrent_delete_later_commit_wins(lake: Lake, connect: Connect) -> None:
    first, second = connect(lake), connect(lake)
    _setup(first)
    writer = first.open_db("shop").write("t", [{"k": 3, "v": "rewritten"}])
    deleter = second.open_db("shop").delete("t", [3])
    writer.commit()
    deleter.commit()
    assert connect(lake).open_db("shop").get_records("t", [3]) == {}


# -- replays that must work, and replays that must not happen --------------------------------


def test_build_table_of_a_table_created_in_the_transaction_replays(
    lake: Lake, connect: Connect
) -> None:
    first, second = connect(lake), connect(lake)
    db = first.create_db("shop").create_table(
        "src", key="k", key_codec="int", tablet_size_limit=5, patch_limit=3
    )
    db = db.write("src", [{"k": i} for i in range(20)]).commit()
    ids = [t["id"] for t in db.list_tablets("src")]
    mine = db.create_table("copy", key="k", key_codec="int").build_table("copy", ids)
    second.open_db("shop").alter_db_meta(lambda _: {"unrelated": True}).commit()
    committed = mine.commit()
    assert full_scan(committed, "copy") == full_scan(committed, "src")
    assert committed.describe()["metadata"] == {"unrelated": True}


def test_blind_delete_before_the_key_codec_is_known_still_wins(
    lake: Lake, connect: Connect
) -> None:
    first, second = connect(lake), connect(lake)
    db = first.create_db("shop").create_table("t", key="k").commit()
    deleter = db.delete("t", [1])
    second.open_db("shop").write("t", [{"k": 1}]).commit()
    deleter.commit()
    assert full_scan(connect(lake).open_db("shop"), "t") == []


def test_blind_delete_with_a_known_codec_wins(lake: Lake, connect: Connect) -> None:
    """The same as above with the codec declared: the later delete removes the key."""
    first, second = connect(lake), connect(lake)
    db = first.create_db("shop").create_table("t", key="k", key_codec="int").commit()
    deleter = db.delete("t", [1])
    second.open_db("shop").write("t", [{"k": 1}]).commit()
    deleter.commit()
    assert full_scan(connect(lake).open_db("shop"), "t") == []


def test_commit_to_a_concurrently_dropped_database_fails(lake: Lake, connect: Connect) -> None:
    first, second = connect(lake), connect(lake)
    db = _setup(first)
    mine = db.create_table("x", key="k").write("t", [{"k": 100}])
    second.drop_db("shop")
    journal = _journal_of(second)
    with pytest.raises(ConflictError, match="'shop' was dropped"):
        mine.commit()
    assert _journal_of(second) == journal
    assert connect(lake).list_dbs() == []


def test_commit_to_a_concurrently_recreated_database_is_a_conflict(
    lake: Lake, connect: Connect
) -> None:
    first, second = connect(lake), connect(lake)
    db = _setup(first)
    mine = db.create_table("x", key="k").alter_db_meta(lambda _: {"from": "old"})
    second.drop_db("shop")
    fresh = second.create_db("shop", metadata={"from": "new"})
    journal = _journal_of(second)
    with pytest.raises(ConflictError, match="'shop'"):
        mine.commit()
    assert _journal_of(second) == journal
    head = connect(lake).open_db("shop")
    assert (head.version, head.list_tables()) == (fresh.version, [])


# -- real processes ---------------------------------------------------------------------------


@contextlib.contextmanager
def atomic_moto(lake: Lake) -> Iterator[None]:
    """On moto, make conditional puts atomic as real S3's are (see tests/s3faults.py)."""
    if lake.kind != "s3":
        yield
        return
    from s3faults import moto_atomic_conditional_puts

    with moto_atomic_conditional_puts():
        yield


WORKERS, COMMITS = 4, 25


@pytest.mark.slow
def test_processes_commit_disjoint_keys(shared_lake: Lake, connect: Connect) -> None:
    conn = connect(shared_lake)
    # Small limits: commits flush pending batches into a multi-level tree while racing.
    conn.create_db("race").create_table(
        "t", key="k", tablet_size_limit=8, branching_factor=3, patch_limit=10
    ).commit()
    barrier = multiprocessing.get_context("spawn").Barrier(WORKERS)
    options = shared_lake.options
    with (
        atomic_moto(shared_lake),
        spawned(
            commit_disjoint,
            *[(shared_lake.uri, options, w, COMMITS, barrier) for w in range(WORKERS)],
        ) as results,
    ):
        reports = [results.get(timeout=600) for _ in range(WORKERS)]
    errors = [error for _, error in reports if error]
    assert not errors, errors[0]

    total = WORKERS * COMMITS
    reader = connect(shared_lake)
    head = reader.open_db("race")
    # Every record is there.
    expected = [{"k": w * 1000 + i, "w": w, "i": i} for w in range(WORKERS) for i in range(COMMITS)]
    records = full_scan(head, "t")
    assert records[1:] == sorted(expected, key=lambda r: r["k"])
    # The history is one chain: versions 0..N without gaps, each parent the one before.
    history = reader.history("race")
    assert [e.version for e in history] == list(range(total + 1, -1, -1))
    assert head.version == total + 1
    for entry in history:
        assert entry.parent == (entry.version - 1 if entry.version else None)
    times = [e.time for e in reversed(history)]
    assert times == sorted(times)
    # Each commit appears once, at the version its worker was told.
    labels = {label: version for result, _ in reports for label, version in result}
    assert len(labels) == total
    by_version = {e.version: e.message for e in history}
    assert all(by_version[version] == label for label, version in labels.items())
    # Each version holds exactly the commits up to it, and the shared key holds the
    # value of the latest of them: the later commit wins.
    for version in range(2, total + 2):
        past = reader.open_db("race", version=version)
        assert past.describe_table("t")["count"] == version  # version - 1 keys, plus key -1
        assert past.get_records("t", [-1])[-1]["last"] == by_version[version]
    assert head.describe_table("t")["tablets"] > 3


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["drop_table", "rebase_false", "same_key"])
def test_conflicts_with_another_process(shared_lake: Lake, connect: Connect, scenario: str) -> None:
    """This process holds a transaction; another process commits; then this one commits."""
    conn = connect(shared_lake)
    _setup(conn)
    mine = conn.open_db("shop").write("t", [{"k": 1, "by": "parent"}])
    all_steps: dict[str, list[tuple[Any, ...]]] = {
        "drop_table": [("drop_table", "t"), ("commit", "drop t")],
        "rebase_false": [("write", "u", [{"k": 5}]), ("commit", "unrelated")],
        "same_key": [("write", "t", [{"k": 1, "by": "child"}]), ("commit", "child")],
    }
    steps = all_steps[scenario]
    assert run_one(run_steps, shared_lake.uri, shared_lake.options, "shop", steps) == [2]
    if scenario == "drop_table":
        with pytest.raises(ConflictError, match="'t'"):
            mine.commit()
        assert connect(shared_lake).open_db("shop").list_tables() == ["u"]
    elif scenario == "rebase_false":
        with pytest.raises(ConflictError, match="'shop'"):
            mine.commit(rebase=False)
        assert connect(shared_lake).open_db("shop").version == 2
    else:
        committed = mine.commit()
        assert committed.version == 3
        head = connect(shared_lake).open_db("shop")
        assert head.get_records("t", [1]) == {1: {"k": 1, "by": "parent"}}
        past = connect(shared_lake).open_db("shop", version=2)
        assert past.get_records("t", [1]) == {1: {"k": 1, "by": "child"}}
