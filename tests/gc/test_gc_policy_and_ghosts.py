"""Two findings of a crash-and-race probe (seventeenth session).

1. A process killed while creating a database (``create_db``, a clone, a CAR
   import) can leave its journal folder with no entry in it. A collection
   that went on without a writer lease fenced every journal, and fencing one
   without a head raised "database ... does not exist": every later
   collection failed, the dead writers' leases were never cleaned up and no
   space was freed, while ``verify`` said all was well.
2. ``set_retention`` read the policy and wrote it back: two calls at once
   lost one override (98 of 100 rounds in the probe), and the next collection
   trimmed the versions the lost override was set to keep. It now holds the
   GC lock, and a collection that read the policy before a change trims and
   deletes nothing.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import merkle
from merkle.errors import UsageError
from merkle.gc import get_policy, set_retention
from merkle.refs import LockHeldError

SPAWN = multiprocessing.get_context("spawn")
ROUNDS = 12


def _ahead(conn: merkle.Connection, seconds: float) -> merkle.Connection:
    """``conn`` with a lease clock ``seconds`` ahead: other writers' leases look expired."""
    timing = conn.leases.timing
    conn.leases.timing = replace(timing, clock=lambda: time.time() + seconds)
    return conn


def test_a_journal_folder_without_entries_does_not_stop_collections(tmp_path: Path) -> None:
    uri = tmp_path.as_uri()
    with merkle.connect(uri) as writer:
        writer.create_db("shop").create_table("t", key="k").write("t", [{"k": 1}]).commit()
        # What a create_db killed between making the folder and linking entry 0 leaves.
        (tmp_path / "refs" / "ghost").mkdir(parents=True)
        # The writer's idle lease is held; a collector whose clock runs 200 s ahead goes
        # on without it and fences every journal.
        with _ahead(merkle.connect(uri), 200.0) as collector:
            report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
            assert report.writer_leases_passed
            assert report.fences == 1  # shop's; the ghost has no head to fence
            merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
    with merkle.connect(uri) as fresh:
        assert merkle.verify(fresh).ok
        assert fresh.create_db("ghost").version == 0  # the name is free to create
        assert [r["k"] for r in fresh.open_db("shop").scan("t")] == [1]


def _set_many(uri: str, db: str, barrier: Any, results: Any) -> None:
    try:
        with merkle.connect(uri) as conn:
            barrier.wait(60)
            for keep in range(1, ROUNDS + 1):
                set_retention(conn, keep_versions=keep * 10, db=db)
        results.put((db, None))
    except Exception as exc:  # reported to the test, which fails naming it
        results.put((db, f"{type(exc).__name__}: {exc}"))


def test_concurrent_set_retention_calls_keep_every_override(tmp_path: Path) -> None:
    uri = tmp_path.as_uri()
    with merkle.connect(uri) as conn:
        set_retention(conn, keep_versions=2)
    barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
    procs = [SPAWN.Process(target=_set_many, args=(uri, db, barrier, results)) for db in "ab"]
    for proc in procs:
        proc.start()
    try:
        outcomes = dict(results.get(timeout=120) for _ in procs)
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
    assert outcomes == {"a": None, "b": None}
    with merkle.connect(uri) as conn:
        policy = get_policy(conn)
    assert {name: r.keep_versions for name, r in policy.databases.items()} == {
        "a": ROUNDS * 10,
        "b": ROUNDS * 10,
    }
    assert policy.default.keep_versions == 2


def test_a_collection_that_read_the_policy_before_a_change_trims_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = tmp_path.as_uri()
    with merkle.connect(uri) as conn:
        db = conn.create_db("audit").create_table("t", key="k")
        for i in range(5):
            db = db.write("t", [{"k": i}]).commit()
        set_retention(conn, keep_versions=1)
        leases = conn.leases
        real = leases.acquire_gc_lock

        def change_first(*args: Any, **kwargs: Any) -> Any:
            # Between the collection's marking (policy: keep 1) and its lock, another
            # process keeps every version of "audit".
            with merkle.connect(uri) as other:
                set_retention(other, keep_versions=1000, db="audit")
            return real(*args, **kwargs)

        monkeypatch.setattr(leases, "acquire_gc_lock", change_first)
        report = merkle.gc(conn, grace="0s")
        assert report.sweep_skipped is not None
        assert "retention policy changed" in report.sweep_skipped
        assert report.blocks_freed == 0
    with merkle.connect(uri) as fresh:
        assert [e.version for e in fresh.history("audit")] == [5, 4, 3, 2, 1, 0]
        assert fresh.open_db("audit", version=1).to_arrow("t").num_rows == 1
        merkle.gc(fresh, grace="0s")  # the next run uses the new policy: keeps them all
        assert len(fresh.history("audit")) == 6


def test_set_retention_waits_for_a_running_collection_then_says_so(tmp_path: Path) -> None:
    with merkle.connect(tmp_path.as_uri()) as conn, merkle.connect(tmp_path.as_uri()) as gc_side:
        lock = gc_side.leases.acquire_gc_lock(60.0)
        try:
            with pytest.raises(LockHeldError, match="GC lock is held"):
                set_retention(conn, keep_versions=3, wait=0)
        finally:
            lock.release()
        assert set_retention(conn, keep_versions=3, wait=0).default.keep_versions == 3
        with pytest.raises(UsageError, match="wait"):
            set_retention(conn, keep_versions=3, wait=-1)
