"""Regressions of the twenty-third session's lease and GC fixes, found by a probe of them.

- A forked child's release of a leased value it inherited waited forever when the
  parent's renewing thread held the handle's lock at the fork.
- A Ctrl-C while a commit's ``finally`` waited for the writer session's lock
  (other threads hold it across store reads) left the commit's use registered.
- A GC report saved before the trim and sweep looked like a finished report of a
  collection that freed nothing when the collection stopped part way.
- A head opened without a lease whose block was damaged (no collection, the
  version still in the journal) was said to be freed by a collection.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import merkle
from merkle.blocks.cid import CID
from merkle.blocks.store import MissingBlockError
from merkle.errors import StorageError
from merkle.gc import collect
from merkle.gc.report import load_reports


def _lake(tmp_path: Path) -> merkle.Connection:
    conn = merkle.connect(f"file://{tmp_path}")
    db = conn.create_db("x").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    db.write("t", [{"k": 2}]).compact("t").commit()
    return conn


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_releases_an_inherited_value_without_waiting(tmp_path: Path) -> None:
    with _lake(tmp_path) as conn:
        value = conn.open_db("x", version=1, lease=True)
        handle = value._reader
        assert handle is not None
        held, done = threading.Event(), threading.Event()

        def renewing() -> None:  # the renewing thread, in the middle of a renewal
            with handle._renewing:
                held.set()
                done.wait(30)

        thread = threading.Thread(target=renewing)
        thread.start()
        held.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: the lock was held at the fork by a thread it lacks
            signal.alarm(20)
            value.release()
            os._exit(0)
        try:
            deadline = time.monotonic() + 20
            status = None
            while status is None and time.monotonic() < deadline:
                done_pid, code = os.waitpid(pid, os.WNOHANG)
                status = code if done_pid else None
                if status is None:
                    threading.Event().wait(0.05)
            if status is None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            assert status == 0, "the child's release returned"
        finally:
            done.set()
            thread.join()
        value.release()
        assert conn.leases.lease_holders("reader") == []


def test_a_ctrl_c_while_a_commit_waits_to_give_its_lease_back(tmp_path: Path) -> None:
    with _lake(tmp_path) as conn:
        session = conn._writer
        real = session._lock
        main = threading.main_thread()

        class Interrupting:
            armed = False

            def __enter__(self) -> Any:
                if self.armed and threading.current_thread() is main:
                    self.armed = False
                    raise KeyboardInterrupt  # = Ctrl-C while waiting for the lock
                return real.__enter__()

            def __exit__(self, *args: Any) -> Any:
                return real.__exit__(*args)

        lock = Interrupting()
        session._lock = lock  # type: ignore[assignment]
        try:
            with pytest.raises(KeyboardInterrupt), session.hold("x"):
                lock.armed = True
        finally:
            session._lock = real
        assert session._holders == {}
        session.release_idle()
        assert conn.leases.lease_holders("writer") == []


def test_a_collection_that_stops_part_way_leaves_a_report_that_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _lake(tmp_path) as conn:

        def stops(*args: Any) -> Any:
            raise StorageError("cannot list 'tmp/': the store went away")

        monkeypatch.setattr(collect, "remove_temporaries", stops)
        with pytest.raises(StorageError, match="went away"):
            merkle.gc(conn, keep_versions=1, grace="0s")
        monkeypatch.undo()
        (stored,) = load_reports(conn.store)
        assert stored["finished_at"] is None
        assert collect.UNFINISHED in stored["notes"]
        report = merkle.gc(conn, keep_versions=1, grace="0s")
        assert collect.UNFINISHED not in report.notes
        assert all(collect.UNFINISHED not in r["notes"] for r in load_reports(conn.store)[-1:])


def test_damage_to_a_kept_version_is_not_blamed_on_a_collection(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}"
    with _lake(tmp_path) as conn:
        tablet = CID.parse(str(conn.open_db("x").list_tablets("t")[0]["id"]))
    with merkle.connect(uri) as reader, merkle.connect(uri) as writer:
        head = reader.open_db("x")  # no lease
        writer.open_db("x").write("t", [{"k": 3}]).commit()  # no longer the head
        writer.store.delete(writer.blocks.key(tablet))  # damage, no collection
        with pytest.raises(MissingBlockError) as raised:
            head.to_arrow("t")
        assert "lease" not in str(raised.value)
