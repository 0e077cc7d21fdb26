"""Stalled writers and collections: fencing, settling, and what a commit may link.

Issue 9, items 2 and 3. A writer that reuses blocks (a revert) and stalls
after its lease check, or whose clock runs far behind, used to lose the
blocks it had just refreshed: the collector waited for its lease to expire
and swept from a listing taken before the refresh. Now a collection that
goes on without a writer's lease records it and fences every journal, so:

* a writer paused before its journal put loses its compare-and-set, replays
  on the fence and writes the blocks again (it still has them staged);
* a writer paused after its put finds its lease in the lock's record and
  settles its commit (floor, successor digest) before returning;
* a writer whose put lands on a slot retention freed while it was paused is
  told its commit cannot be proven (``CommitIndeterminateError``); its entry
  lies below the floor, where no reader looks, and the next trim removes it.

A commit also proves that every block it links from outside its base version
(``build_table``'s tablets) is still stored, under its writer lease.

The interleavings are forced with hooks and events; time is moved by giving
the collector a clock that runs ahead (a paused writer's lease looks expired
to it), never by sleeping.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from conftest import Lake
from gc_helpers import connect, dump, missing_blocks, same_dump
from test_gc_writer_leases import ROWS_A, ROWS_B, WAIT, RevertWriter, revert_history

import merkle
from merkle.errors import CommitIndeterminateError, NotFoundError
from merkle.refs.entry import entry_key, journal_prefix, parse_entry_key
from merkle.refs.writer import DEFAULT_WRITER_TTL


def ahead(conn: merkle.Connection, seconds: float) -> merkle.Connection:
    """``conn`` with a lease clock ``seconds`` ahead of the real one (a collector that sees
    other writers' leases as that much older)."""
    timing = conn.leases.timing
    conn.leases.timing = replace(timing, clock=lambda: time.time() + seconds)
    return conn


def _wait(event: threading.Event, what: str) -> None:
    assert event.wait(WAIT), f"timed out waiting until {what}"


class Pause:
    """Stop the first call of ``obj.name`` until released; ``reached`` is set on arrival."""

    def __init__(self, obj: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached, self.go = threading.Event(), threading.Event()
        real = getattr(obj, name)
        fired: list[bool] = []

        def paused(*args: Any, **kwargs: Any) -> Any:
            if not fired:
                fired.append(True)
                self.reached.set()
                _wait(self.go, "the test lets the call go on")
            return real(*args, **kwargs)

        monkeypatch.setattr(obj, name, paused)


# Past the writer lease's TTL and skew margin: stalled for that long. Or 200 s: the
# writer's clock runs 200 s behind the collector's.
STALLS = [DEFAULT_WRITER_TTL + 5.0 + 1.0, 200.0]


@pytest.mark.parametrize("stall", STALLS)
def test_a_writer_stalled_before_its_put_is_fenced_off_and_replays(
    lake: Lake, monkeypatch: pytest.MonkeyPatch, stall: float
) -> None:
    v1, v2, only_v1 = revert_history(lake)
    with connect(lake) as writer, ahead(connect(lake), stall) as collector:
        revert = RevertWriter(writer)  # re-commits ROWS_A: v1's old, unreferenced blocks
        pause = Pause(writer.refs, "commit", monkeypatch)  # after its lease check
        revert.thread.start()
        _wait(pause.reached, "the writer is about to put its journal entry")
        report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
        assert len(report.writer_leases_passed) == 1
        assert report.fences == 1
        assert set(report.freed) & only_v1, "the reused blocks were swept meanwhile"
        pause.go.set()
        head = revert.join()
    with connect(lake) as fresh:
        history = fresh.history("shop", limit=3)
        assert [e.message for e in history] == ["revert", "gc fence", None][: len(history)]
        assert history[1].root == v2.root, "the fence repeats the head it found"
        assert missing_blocks(fresh.store, head.root) == []
        assert same_dump(dump(fresh.open_db("shop")), dump(v1))
        assert merkle.verify(fresh).ok


def test_a_writer_passed_after_its_put_settles_its_commit(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, _, _ = revert_history(lake)
    settled: list[Any] = []
    with connect(lake) as writer, ahead(connect(lake), STALLS[0]) as collector:
        revert = RevertWriter(writer)
        pause = Pause(writer._writer, "passed", monkeypatch)  # right after the put
        real_settle = merkle.refs.writer.settle_passed_commit

        def spy(*args: Any, **kwargs: Any) -> None:
            settled.append(args[2])
            real_settle(*args, **kwargs)

        monkeypatch.setattr(merkle.refs.writer, "settle_passed_commit", spy)
        revert.thread.start()
        _wait(pause.reached, "the writer put its journal entry")
        report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
        assert len(report.writer_leases_passed) == 1
        pause.go.set()
        head = revert.join()
    assert [entry.version for entry in settled] == [head.version]
    with connect(lake) as fresh:
        assert fresh.open_db("shop").version == head.version + 1, "the fence came after it"
        assert missing_blocks(fresh.store, head.root) == []
        assert same_dump(dump(fresh.open_db("shop")), dump(v1))
        assert merkle.verify(fresh).ok


def test_a_put_on_a_slot_retention_freed_is_never_reported_as_committed(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    revert_history(lake)
    with connect(lake) as writer, connect(lake) as other:
        stale = writer.open_db("shop").write("t", [{"k": 99, "v": "stale"}])
        base = stale.version
        pause = Pause(writer.refs, "_create", monkeypatch)  # after its floor check
        errors: list[BaseException] = []

        def run() -> None:
            try:
                stale.commit(message="stale", rebase=False)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        _wait(pause.reached, "the writer is about to put its entry")
        db = other.open_db("shop")
        for rows in (ROWS_B, ROWS_A, ROWS_B):
            db = db.write("t", rows).commit()
        with ahead(connect(lake), STALLS[0]) as collector:
            report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
        assert report.fences == 1
        assert writer.refs.floor("shop") > base + 1, "the slot it targets was freed"
        pause.go.set()
        thread.join(WAIT)
        assert len(errors) == 1
        assert isinstance(errors[0], CommitIndeterminateError), errors[0]
        assert "cannot be proven" in str(errors[0])
    with connect(lake) as fresh:
        head = fresh.open_db("shop")
        assert all(e.message != "stale" for e in fresh.history("shop"))
        assert head.get_records("t", [99]) == {}
        assert fresh.store.exists(entry_key("shop", base + 1)), "a stray below the floor"
        assert merkle.verify(fresh).ok
        merkle.gc(fresh, keep_versions=1, grace="0s")
        versions = {
            parse_entry_key("shop", info.key) for info in fresh.store.list(journal_prefix("shop"))
        }
        assert base + 1 not in versions, "the next trim removes the stray entry"
        # keep_versions counts committed states, not fences: the fence at the head
        # stays with the state it repeats (doc/operations.md, "Retention").
        assert fresh.history("shop")[0].fence
        assert versions - {None} == {head.version - 1, head.version}


def test_build_table_refuses_tablets_that_a_collection_removed(lake: Lake) -> None:
    """Tablets taken from an old, unleased version and collected before the commit."""
    v1, _, _ = revert_history(lake)
    with connect(lake) as conn:
        old_tablets = [t["id"] for t in conn.open_db("shop", version=v1.version).list_tablets("t")]
        head = conn.open_db("shop")
        built = head.build_table("t", old_tablets)  # the tablets are still stored here
        with connect(lake) as collector:
            report = merkle.gc(collector, keep_versions=1, grace="0s")
        assert set(old_tablets) & set(report.freed), "then a collection removed them"
        with pytest.raises(NotFoundError, match="build_table") as info:
            built.commit(message="restore")
        assert "nothing was committed" in str(info.value)
        assert conn.open_db("shop").version == head.version
        assert merkle.verify(conn).ok
    with connect(lake) as fresh, pytest.raises(NotFoundError, match="missing"):
        fresh.open_db("shop").build_table("t", old_tablets)  # gone before: refused at once


def test_build_table_with_tablets_still_stored_commits(lake: Lake) -> None:
    v1, _, _ = revert_history(lake)
    with connect(lake) as conn:
        old_tablets = [t["id"] for t in conn.open_db("shop", version=v1.version).list_tablets("t")]
        restored = conn.open_db("shop").build_table("t", old_tablets).commit(message="restore")
        assert same_dump(dump(restored), dump(v1))


def test_creating_a_dropped_database_again_retries_past_a_fence(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    revert_history(lake)
    with connect(lake) as conn:
        conn.drop_db("shop")
        real = conn.refs.commit
        fenced: list[int] = []

        def fence_first(*args: Any, **kwargs: Any) -> Any:
            if not fenced:  # a collection fences the dropped journal just before the put
                fenced.append(conn.refs.fence("shop", 7).version)
            return real(*args, **kwargs)

        monkeypatch.setattr(conn.refs, "commit", fence_first)
        again = conn.create_db("shop")
        assert again.version == fenced[0] + 1
        assert again.list_tables() == []
        assert conn.refs.get("shop", fenced[0]).fence
