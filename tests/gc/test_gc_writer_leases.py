"""Writers and clones racing a collection, made deterministic with hooks and events.

A writer re-creating blocks that only old versions reach (a revert) finds
them stored and merely refreshes their timestamps; the collector must not
delete such a block after the writer relied on it. The interleavings are
forced with ``threading.Event`` hand-offs between a writer thread and hooks
placed on the collector's and the writer's own objects; nothing sleeps to
synchronise. Block ages are set with ``backdate`` (2 hours old), so they are
older than any lease.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Lake
from gc_helpers import backdate, connect, dump, missing_blocks, reachable, same_dump

import merkle
from merkle.blocks.store import BLOCK_PREFIX
from merkle.errors import NotFoundError

ROWS_A = [{"k": i, "v": "a", "n": i} for i in range(12)]
ROWS_B = [{"k": i, "v": "b", "n": -i} for i in range(12)]
WAIT = 60.0  # a safety net on every hand-off: a hang fails the test instead of blocking it


def revert_history(lake: Lake) -> tuple[merkle.Database, merkle.Database, set[str]]:
    """v1 holds ROWS_A, v2 replaces them with ROWS_B; (v1, v2, blocks only v1 reaches).

    Every commit flushes into tablets (patch_limit=0), so writing ROWS_A again
    re-creates v1's tablet and segment blocks byte for byte. The blocks only
    v1 reaches are backdated two hours.
    """
    with connect(lake) as conn:
        db = conn.create_db("shop").create_table("t", key="k", patch_limit=0)
        v1 = db.write("t", ROWS_A).commit()
        v2 = v1.write("t", ROWS_B).commit()
        only_v1 = reachable(conn.store, [v1.root]) - reachable(conn.store, [v2.root])
        backdate(conn.store, [BLOCK_PREFIX + cid for cid in only_v1], time.time() - 7200)
    return v1, v2, only_v1


def _hook(obj: Any, name: str, before: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``before()`` ahead of the first call of ``obj.name``."""
    real = getattr(obj, name)
    fired: list[bool] = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        if not fired:
            fired.append(True)
            before()
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, hooked)


class CommitThread:
    """A thread committing ``db`` with ``message``, stopped at chosen points of its commit
    by hooks; :meth:`join` gives its result or raises its error."""

    def __init__(self, db: merkle.Database, message: str) -> None:
        self.db = db
        self.message = message
        self.result: merkle.Database | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"{message}-writer")

    def _run(self) -> None:
        try:
            self.result = self.db.commit(message=self.message)
        except BaseException as exc:
            self.error = exc

    def join(self) -> merkle.Database:
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), "the writer thread hung"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class RevertWriter(CommitThread):
    """A thread committing ROWS_A again (a revert), stopped at chosen points of its commit."""

    def __init__(self, conn: merkle.Connection) -> None:
        super().__init__(conn.open_db("shop").write("t", ROWS_A), "revert")
        self.conn = conn


def _wait(event: threading.Event, what: str) -> None:
    assert event.wait(WAIT), f"timed out waiting until {what}"


def test_a_block_refreshed_after_the_listing_survives_a_collection_that_stops_waiting(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writer lease before the lock; listing; writer refreshes; GC gives up waiting; sweep."""
    v1, _, only_v1 = revert_history(lake)
    inside, listed, flushed, collected = (threading.Event() for _ in range(4))
    with connect(lake) as writer, connect(lake) as collector:
        revert = RevertWriter(writer)

        def pause_before_flush() -> None:
            inside.set()  # the commit holds its writer lease now
            _wait(listed, "the collector listed the blocks")

        # A commit refreshes the blocks it reuses (and learns which it must write) in
        # ``absent``; it writes the new ones with its journal entry.
        real_absent = writer.blocks.absent

        def absent(*args: Any, **kwargs: Any) -> Any:
            pause_before_flush()
            try:
                return real_absent(*args, **kwargs)
            finally:
                flushed.set()

        monkeypatch.setattr(writer.blocks, "absent", absent)
        _hook(writer.refs, "commit", lambda: _wait(collected, "the collection ended"), monkeypatch)
        revert.thread.start()
        _wait(inside, "the writer is inside its commit")

        real_live = collector.leases.live

        def live(kind: str | None = None) -> Any:
            if kind == "writer" and not listed.is_set():
                listed.set()  # wait_for_writers: the listing is done
                _wait(flushed, "the writer flushed its blocks")
            return real_live(kind)

        monkeypatch.setattr(collector.leases, "live", live)
        try:
            report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
        finally:
            collected.set()
            listed.set()
        head = revert.join()
        assert report.writer_leases_waited == 1
        assert missing_blocks(collector.store, head.root) == [], (
            f"freed {sorted(set(report.freed) & only_v1)} that the revert reuses"
        )
        assert same_dump(dump(collector.open_db("shop")), dump(v1))


def test_a_writer_that_commits_while_the_collector_waits_keeps_its_refreshed_blocks(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same interleaving, but the collector waits for the writer (the default)."""
    v1, _, _ = revert_history(lake)
    inside, listed = threading.Event(), threading.Event()
    with connect(lake) as writer, connect(lake) as collector:
        revert = RevertWriter(writer)

        def pause_before_flush() -> None:
            inside.set()
            _wait(listed, "the collector listed the blocks")

        _hook(writer.blocks, "absent", pause_before_flush, monkeypatch)
        revert.thread.start()
        _wait(inside, "the writer is inside its commit")
        real_live = collector.leases.live

        def live(kind: str | None = None) -> Any:
            if kind == "writer":
                listed.set()  # wait_for_writers: the listing is done
            return real_live(kind)

        monkeypatch.setattr(collector.leases, "live", live)
        report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=WAIT)
        head = revert.join()
        assert report.blocks_freed > 0
        assert missing_blocks(collector.store, head.root) == []
        assert same_dump(dump(collector.open_db("shop")), dump(v1))
        assert merkle.verify(collector).ok


def test_a_clone_by_root_racing_a_collection_is_whole_or_refused(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, _, _ = revert_history(lake)
    with connect(lake) as conn:
        _hook(conn.refs, "commit", lambda: _collect(lake), monkeypatch)
        try:
            clone = conn.create_db("restored", root=v1.root)
        except NotFoundError:
            return  # refused: the version is gone
        assert missing_blocks(conn.store, clone.root) == []


def test_a_clone_of_an_old_version_racing_a_collection_is_whole_or_refused(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    revert_history(lake)
    with connect(lake) as conn:
        old = conn.open_db("shop", version=1)
        _hook(conn.refs, "commit", lambda: _collect(lake), monkeypatch)
        try:
            clone = conn.create_db("restored", root=old)
        except NotFoundError:
            return  # refused: the version is gone
        assert missing_blocks(conn.store, clone.root) == []


def _collect(lake: Lake) -> None:
    """A collection in the middle of the clone: the clone's writer lease is live, so the
    collection waits (briefly here: the clone is paused in this same thread) and then
    must not sweep; before the fix it freed the blocks the clone was about to name."""
    with connect(lake) as collector:
        report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0.2)
    assert report.sweep_skipped is not None
    assert report.blocks_freed == 0


def test_versions_committed_during_a_collection_stay_whole_while_their_entries_remain(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two commits land between the first mark and the listing (no lock is held yet).

    The trim point was planned from the old head, so the first of the two
    stays in the journal although ``keep_versions=1`` no longer covers it by
    the time the collection re-marks; a reader may still open it, so it must
    stay whole. Before the fix its own blocks were swept (found by the
    concurrent S3 test as a reader meeting a missing root).
    """
    revert_history(lake)  # versions 0..2 of "shop"
    committed: list[merkle.Database] = []

    def commit_twice() -> None:
        with connect(lake) as writer:
            db = writer.open_db("shop")
            for tag in ("c", "d"):
                db = db.write("t", [{"k": i, "v": tag, "n": i} for i in range(12)]).commit()
                committed.append(db)

    with connect(lake) as collector:
        _hook(collector.blocks, "list", commit_twice, monkeypatch)
        report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=WAIT)
    assert [db.version for db in committed] == [3, 4]
    assert report.databases["shop"].oldest_kept is not None
    with connect(lake) as reader:
        middle = reader.open_db("shop", version=3)  # its entry was not trimmed
        assert missing_blocks(reader.store, middle.root) == []
        assert same_dump(dump(middle), dump(committed[0]))
        assert merkle.verify(reader).ok
