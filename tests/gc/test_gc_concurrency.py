"""Safety under concurrency: writers, leased readers and a GC loop in real processes.

Two writer processes commit random updates and deletes over three tables
(tiny tablet and patch limits, so pending batches flush and tablets split
and merge all the time); two reader processes open old versions with
``lease=True`` and read them whole, before and after collections that trim
them; one process runs ``merkle.gc(conn, keep_versions=2, grace="0s")`` in
a loop. All start together behind a barrier (multiprocessing "spawn") and
coordinate through a condition and counters (see ``gc_workers``); the run
is bounded by commit and read counts.

Afterwards: no process met an error (readers report any, including a
missing block), every read matches the model rebuilt from the writers'
reported operations, every version still in a journal reads back whole
and equal to the model, and ``merkle.verify`` is clean.
"""

from __future__ import annotations

import multiprocessing
import queue
from typing import Any

import gc_workers as w
import pytest
from conftest import Lake
from gc_helpers import connect, missing_blocks

import merkle

SPAWN = multiprocessing.get_context("spawn")


def _setup(lake: Lake) -> dict[int, w.State]:
    """Version 0 (empty) and version 1 (three tables); the model of both."""
    with connect(lake) as conn:
        db = conn.create_db(w.DB)
        for table in w.TABLES:
            db = db.create_table(table, key="id", key_codec="int", **w.LIMITS)
            db = db.write(table, w.initial_rows(table))
        assert db.commit(message="setup").version == 1
    first = {t: {r["id"]: r for r in w.initial_rows(t)} for t in w.TABLES}
    return {0: {}, 1: first}


def run_concurrently(lake: Lake, *, writers: int, commits: int, readers: int, reads: int) -> None:
    states = _setup(lake)
    sync = w.Sync(
        barrier=SPAWN.Barrier(writers + readers + 1),
        cond=SPAWN.Condition(),
        counters=SPAWN.Array("i", 5, lock=False),
        writers=writers,
        readers=readers,
    )
    results = SPAWN.Queue()
    args = (lake.uri, lake.options)
    procs = [
        SPAWN.Process(target=w.writer, args=(*args, i, commits, sync, results), name=f"writer-{i}")
        for i in range(writers)
    ]
    procs += [
        SPAWN.Process(target=w.reader, args=(*args, i, reads, sync, results), name=f"reader-{i}")
        for i in range(readers)
    ]
    procs.append(SPAWN.Process(target=w.collector, args=(*args, sync, results), name="collector"))
    messages: list[tuple[Any, ...]] = []
    for proc in procs:
        proc.start()
    try:
        # Read while they run (a child cannot exit with its messages unread); each sends
        # ("end", who) last. The timeout is a safety net against a hang, not a schedule.
        ended = 0
        while ended < len(procs):
            try:
                message = results.get(timeout=w.WAIT)
            except queue.Empty:
                break
            messages.append(message)
            ended += message[0] == "end"
        for proc in procs:
            proc.join(w.WAIT)
    finally:
        hung = [proc.name for proc in procs if proc.is_alive()]
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    assert not hung, f"processes hung: {hung}"

    errors = [m for m in messages if m[0] == "error"]
    assert not errors, "\n\n".join(f"{who}:\n{text}" for _, who, text in errors)
    assert [proc.exitcode for proc in procs] == [0] * len(procs)

    # The model: every version from the writers' reported operations, in version order.
    commits_made = sorted((m[2], m[3]) for m in messages if m[0] == "commit")
    assert len(commits_made) >= writers * commits
    assert [v for v, _ in commits_made] == list(range(2, 2 + len(commits_made)))
    for version, ops in commits_made:
        states[version] = w.apply_ops(states[version - 1], ops)
    head = commits_made[-1][0]

    reads_done = [m for m in messages if m[0] == "read"]
    assert reads_done, "no reader managed a read"
    for _, rid, version, digest, _trimmed in reads_done:
        assert digest == w.model_digest(states[version]), f"reader {rid}, version {version}"
    # Each reader waited for three commits and then two collections while holding its
    # lease (writers commit until the readers are done): every leased version was outside
    # retention and trimmed while it was being read.
    assert all(trimmed for *_, trimmed in reads_done)
    ends = {m[1]: m[2] for m in messages if m[0] == "reader"}
    assert sorted(ends) == list(range(readers))
    assert all(n == reads for n in ends.values()), ends

    runs = [m for m in messages if m[0] == "gc"]
    assert sum(m[2] for m in runs) > 0, "the collections freed nothing: the test is moot"
    assert sum(m[3] for m in runs) > 0
    assert any(m[4] > 0 for m in runs), "no collection ever saw a reader lease"

    with connect(lake, cache_bytes=0) as conn:
        history = conn.history(w.DB)
        assert history[0].version == head
        assert [e.version for e in history][:2] == [head, head - 1]  # retention: 2 newest
        for entry in history:
            assert entry.root is not None
            assert missing_blocks(conn.store, entry.root) == [], entry.version
            db = conn.open_db(w.DB, version=entry.version)
            assert w.db_digest(db) == w.model_digest(states[entry.version]), entry.version
        assert conn.leases.live("reader") == []
        report = merkle.verify(conn)
        assert report.ok, report.summary()


@pytest.mark.slow
def test_gc_under_concurrent_writers_and_leased_readers(shared_lake: Lake) -> None:
    if shared_lake.kind == "file":
        run_concurrently(shared_lake, writers=2, commits=20, readers=2, reads=5)
    else:  # S3 (moto over HTTP, every collection ~10 s on a slow machine): a shorter run
        run_concurrently(shared_lake, writers=2, commits=6, readers=2, reads=2)
