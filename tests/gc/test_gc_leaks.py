"""No stall and no leak: forgotten close(), killed writers, journals that only grow.

Issue 9, items 6 and 9. A script that commits and exits without ``close()``
used to leave a writer lease that held the next ``merkle gc`` up for minutes
(silently); a killed writer's lease did the same. Trimmed journal entries
used to leave a tombstone each, forever (2,000 commits with
``keep_versions=1`` left 2,003 journal objects, also after a drop).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import Lake
from gc_helpers import connect

import merkle
from merkle.refs import JournalConflictError
from merkle.refs.entry import encode_trimmed, entry_key, journal_prefix, trimmed_key
from merkle.refs.timing import DEFAULT_SKEW_MARGIN
from merkle.refs.writer import DEFAULT_WRITER_TTL

SCRIPT = """
import os, sys, merkle
conn = merkle.connect(sys.argv[1], **eval(sys.argv[2]))
db = conn.create_db("shop").create_table("t", key="k")
db.write("t", [{"k": 1, "v": "x"}]).commit()
if sys.argv[3] == "kill":
    os.kill(os.getpid(), 9)  # no cleanup at all: the lease stays
# "exit": the interpreter exits normally, without conn.close()
"""


def run_script(lake: Lake, how: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, lake.uri, repr(lake.options), how],
        capture_output=True,
        timeout=120,
        check=False,
    )
    return done.returncode


def test_a_script_that_forgets_close_leaves_no_lease(shared_lake: Lake) -> None:
    assert run_script(shared_lake, "exit") == 0
    with connect(shared_lake) as conn:
        assert conn.leases.lease_holders() == [], "released at interpreter exit"
        told: list[str] = []
        report = merkle.gc(conn, writer_wait=0, notify=told.append)
        assert report.writer_leases_waited == 0
        assert report.sweep_skipped is None
        assert told == []


def test_a_killed_writer_holds_a_collection_up_for_seconds_and_is_said(shared_lake: Lake) -> None:
    assert run_script(shared_lake, "kill") != 0
    with connect(shared_lake) as conn:
        (lease,) = conn.leases.lease_holders("writer")
        assert lease.expires - lease.start == DEFAULT_WRITER_TTL <= 15
        told: list[str] = []
        report = merkle.gc(conn, writer_wait=0, notify=told.append)
        assert report.sweep_skipped is not None, "a live lease: nothing deleted yet"
        assert any("waiting for 1 writer lease" in m and " UTC (" in m for m in told), told
        # Once its TTL and the skew margin are over, the next collection goes on.
        timing = conn.leases.timing
        later = lease.expires + DEFAULT_SKEW_MARGIN + 1 - time.time()
        conn.leases.timing = replace(timing, clock=lambda: time.time() + later)
        report = merkle.gc(conn, writer_wait=0, notify=told.append)
        assert report.sweep_skipped is None
        assert len(report.writer_leases_passed) == 1
        assert conn.leases.lease_holders() == [], "the dead lease was removed"


def commits(conn: merkle.Connection, n: int) -> merkle.Database:
    db = conn.create_db("shop").create_table("t", key="k")
    for i in range(n):
        db = db.write("t", [{"k": i % 7, "v": i}]).commit()
    return db


def journal_objects(conn: merkle.Connection, name: str = "shop") -> list[str]:
    return [info.key for info in conn.store.list(journal_prefix(name))]


def test_journal_storage_follows_the_versions_kept(lake: Lake) -> None:
    n = 40 if lake.kind == "s3" else 150
    with connect(lake) as conn:
        head = commits(conn, n)
        merkle.gc(conn, keep_versions=1, grace="0s")
        assert len(journal_objects(conn)) <= 3, journal_objects(conn)  # head, TRIMMED, HEAD
        assert conn.history("shop") == [head.entry]
        # A writer based on a trimmed version can never create its slot again.
        with pytest.raises(JournalConflictError, match="removed by retention"):
            conn.refs.commit("shop", 5, head.root)
        assert not conn.store.exists(entry_key("shop", 6))
        merkle.gc(conn, keep_versions=3, grace="0s")
        conn.drop_db("shop")
        merkle.gc(conn, keep_versions=1, grace="0s")
        left = journal_objects(conn)
        assert len(left) <= 3, left  # the drop entry, TRIMMED, HEAD
        assert conn.list_dbs() == []
        again = conn.create_db("shop")
        assert again.version == head.version + 2


def test_tombstones_of_older_versions_are_removed_by_the_next_trim(lake: Lake) -> None:
    """Lakes trimmed by an older merkle-db hold a tombstone per trimmed version."""
    with connect(lake) as conn:
        head = commits(conn, 12)
        for version in range(8):
            entry = conn.refs.get("shop", version)
            conn.store.put(entry_key("shop", version), encode_trimmed(entry))
        conn.store.put(trimmed_key("shop"), b"5")  # an old trim that stopped early
    with connect(lake) as conn:
        assert conn.refs.oldest_version("shop") == 8
        assert conn.history("shop")[-1].version == 8
        report = merkle.verify(conn)
        assert report.ok, report.summary()
        merkle.gc(conn, keep_versions=2, grace="0s")
        assert len(journal_objects(conn)) <= 4
        assert [e.version for e in conn.history("shop")] == [head.version, head.version - 1]


def test_gc_removes_temporary_files_older_than_the_grace_period(tmp_path: Path) -> None:
    """Writers killed during a block flush leave ``.tmp-*`` files (issue 9, item 8)."""
    lake = tmp_path / "lake"
    with merkle.connect(lake.as_uri()) as conn:
        commits(conn, 2)
        blocks = lake / "blocks"
        old, young = blocks / f".tmp-{'a' * 32}", blocks / f".tmp-{'b' * 32}"
        old.write_bytes(b"x" * 100)
        young.write_bytes(b"y" * 10)
        os.utime(old, (time.time() - 7200, time.time() - 7200))
        report = merkle.gc(conn)  # the default grace: one hour
        assert (report.temporaries_removed, report.temporary_bytes_removed) == (1, 100)
        assert not old.exists()
        assert young.exists(), "a writer may still be about to rename it"
        assert "removed 1 leftover temporary file" in report.summary()


def test_gc_with_no_grace_spares_a_temporary_file_a_writer_is_about_to_rename(
    tmp_path: Path,
) -> None:
    """With ``grace="0s"`` GC removed a lease file's temporary between its write and its
    link, and the concurrent writer's commit failed (tests/gc/test_gc_concurrency.py
    found it): a temporary younger than ten minutes is a write in flight."""
    lake = tmp_path / "lake"
    with merkle.connect(lake.as_uri()) as conn:
        commits(conn, 2)
        leases = lake / "leases"
        leases.mkdir(exist_ok=True)
        in_flight = leases / f".tmp-{'c' * 32}"
        in_flight.write_bytes(b"lease")
        os.utime(in_flight, (time.time() - 60, time.time() - 60))
        report = merkle.gc(conn, keep_versions=1, grace="0s")
        assert in_flight.exists()
        assert report.temporaries_removed == 0
