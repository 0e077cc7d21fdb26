"""Threads sharing one connection keep committing while GC runs on it.

Found by an adversarial probe: a commit that needed a new writer lease waited
for the GC lock while holding the connection's writer-session lock, so the
other threads' commits, and the thread renewing their lease, waited behind
it; the collection waited for their leases to lapse (about 20 s a run), and
their commits then failed with LeaseExpiredError. A new lease is now
acquired outside that lock.
"""

from __future__ import annotations

import threading
from pathlib import Path

import merkle

THREADS, COMMITS = 3, 6
#: A hang guard only (the run takes seconds); not a timing assertion.
JOIN = 300.0


def test_threads_sharing_a_connection_commit_while_gc_runs_on_it(tmp_path: Path) -> None:
    with merkle.connect(tmp_path / "lake") as conn:
        conn.create_db("a").create_table("t", key="k").write("t", [{"k": -1}]).commit()
        stop = threading.Event()
        errors: list[BaseException] = []
        collections = 0

        def writer(tid: int) -> None:
            try:
                for i in range(COMMITS):
                    conn.open_db("a").write("t", [{"k": tid * 1000 + i}]).commit()
            except BaseException as exc:
                errors.append(exc)

        def collector() -> None:
            nonlocal collections
            try:
                while not stop.is_set():
                    merkle.gc(conn, keep_versions=1, grace="0s")
                    collections += 1
                    stop.wait(0.1)  # pacing: commits run between collections too
            except BaseException as exc:
                errors.append(exc)

        gc_thread = threading.Thread(target=collector, daemon=True)
        writers = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(THREADS)]
        gc_thread.start()
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join(JOIN)
        stop.set()
        gc_thread.join(JOIN)
        assert not any(t.is_alive() for t in [*writers, gc_thread]), "a thread hung"
        assert errors == []
        assert collections > 0
        keys = {r["k"] for r in conn.open_db("a").scan("t")}
        assert keys == {-1} | {t * 1000 + i for t in range(THREADS) for i in range(COMMITS)}
        assert merkle.verify(conn).ok
