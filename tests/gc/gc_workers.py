"""Code run in child processes by the GC tests (importable under "spawn").

Every worker reports through a queue: ``("error", who, traceback)`` for any
exception, its own results, and ``("end", who)`` as its last message.
Workers coordinate through a shared :class:`Sync` (a condition and
counters), never by sleeping.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import merkle
from merkle.errors import NotFoundError

DB = "conc"
TABLES = ("t0", "t1", "t2")
KEYS = 60  # key space per table: writes hit existing and new keys, deletes hit both
#: A safety net on every wait: a hang becomes a reported error, not a stuck test.
WAIT = 300.0
#: A writer stops after this many times its commit count even if readers still wait.
MAX_COMMITS_FACTOR = 20

#: Shapes that make commits flush pending batches and split and merge tablets often.
LIMITS: dict[str, Any] = {"tablet_size_limit": 8, "branching_factor": 4, "patch_limit": 6}

State = dict[str, dict[int, dict[str, Any]]]  # table -> key -> record
Op = tuple[str, str, list[Any]]  # (table, "write" | "delete", records | keys)

# -- the model -------------------------------------------------------------------


def initial_rows(table: str) -> list[dict[str, Any]]:
    """The rows version 1 holds in ``table``."""
    return [{"id": k, "v": -1, "s": f"{table}-{k}"} for k in range(0, KEYS, 2)]


def apply_ops(state: State, ops: Sequence[Op]) -> State:
    """``state`` after a commit made of ``ops`` (in order: later ops win)."""
    out = {table: dict(rows) for table, rows in state.items()}
    for table, kind, items in ops:
        rows = out.setdefault(table, {})
        if kind == "write":
            for record in items:
                rows[record["id"]] = dict(record)
        else:
            for key in items:
                rows.pop(key, None)
    return out


def digest(tables: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """A hash of whole tables (records in key order), to compare reads with the model."""
    text = json.dumps({t: list(rows) for t, rows in sorted(tables.items())}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def model_digest(state: State) -> str:
    return digest({t: [rows[k] for k in sorted(rows)] for t, rows in state.items()})


def db_digest(db: merkle.Database) -> str:
    """The digest of every table of ``db``, by full scans."""
    return digest({t: list(db.scan(t)) for t in db.list_tables()})


# -- coordination ----------------------------------------------------------------


COMMITS, GC_RUNS, WRITERS_DONE, READERS_DONE, READERS_WAITING = range(5)


@dataclass
class Sync:
    """A barrier, a condition and counters shared by every process of a run."""

    barrier: Any
    cond: Any
    counters: Any  # multiprocessing Array of int, indexed by the constants above
    writers: int
    readers: int

    def add(self, index: int, n: int = 1) -> None:
        with self.cond:
            self.counters[index] += n
            self.cond.notify_all()

    def value(self, index: int) -> int:
        with self.cond:
            return int(self.counters[index])

    def wait_for(self, what: str, predicate: Callable[[], bool]) -> None:
        with self.cond:
            if not self.cond.wait_for(predicate, timeout=WAIT):
                raise TimeoutError(f"waited {WAIT:g}s until {what}")

    def wait_at_least(self, index: int, target: int, what: str) -> None:
        """Wait until counter ``index`` reaches ``target``."""
        self.wait_for(what, lambda: self.counters[index] >= target)


def _report_errors(results: Any, who: str) -> Callable[[BaseException], None]:
    def report(exc: BaseException) -> None:
        results.put(("error", who, "".join(traceback.format_exception(exc))))

    return report


# -- workers of the concurrency test -----------------------------------------------


def writer(
    uri: str, options: dict[str, Any], wid: int, commits: int, sync: Sync, results: Any
) -> None:
    """Commit random updates and deletes over the tables; report each commit.

    Commits at least ``commits`` times and goes on until every reader is
    done (readers wait for commits), up to ``MAX_COMMITS_FACTOR`` times
    ``commits`` (reaching that is an error: a reader is stuck).
    """
    report = _report_errors(results, f"writer {wid}")
    try:
        with merkle.connect(uri, **options) as conn:
            sync.barrier.wait(WAIT)
            for i in range(commits * MAX_COMMITS_FACTOR):
                if i >= commits and sync.value(READERS_DONE) == sync.readers:
                    break
                rng = random.Random(f"writer {wid} commit {i}")
                db = conn.open_db(DB)
                ops: list[Op] = []
                for table in rng.sample(TABLES, 2):
                    keys = rng.sample(range(KEYS), rng.randint(1, 6))
                    records = [
                        {"id": k, "v": wid * 1000 + i, "s": "x" * rng.randrange(40)} for k in keys
                    ]
                    db = db.write(table, records)
                    ops.append((table, "write", records))
                    deletes = rng.sample(range(KEYS), rng.randint(0, 3))
                    if deletes:
                        db = db.delete(table, deletes)
                        ops.append((table, "delete", deletes))
                committed = db.commit(message=f"writer {wid} commit {i}")
                results.put(("commit", wid, committed.version, ops))
                sync.add(COMMITS)
            else:
                raise AssertionError(f"readers still not done after {i + 1} commits")
    except BaseException as exc:
        report(exc)
    finally:
        sync.add(WRITERS_DONE)
        results.put(("end", f"writer {wid}"))


def reader(
    uri: str, options: dict[str, Any], rid: int, reads: int, sync: Sync, results: Any
) -> None:
    """Open old versions with reader leases and read them whole, before and after collections.

    Each read: open version ``head - k`` (k in 1..3) with ``lease=True``;
    scan every table and fetch every block from the store (no cache:
    ``cache_bytes=0`` and a direct block walk); wait for three more commits
    (writers go on until the readers are done, so they come; the version
    is then outside ``keep_versions=2``) and then for a collection that
    started after them (so it is trimmed); read it whole
    again; check it was trimmed; release. Reports ``("read", rid, version,
    digest, trimmed)`` for each read and ``("reader", rid, reads, skipped)``.
    """
    from gc_helpers import missing_blocks  # spawned children import it by name

    report = _report_errors(results, f"reader {rid}")
    done = skipped = 0
    try:
        with merkle.connect(uri, cache_bytes=0, **options) as conn:
            sync.barrier.wait(WAIT)
            rng = random.Random(f"reader {rid}")
            for _ in range(reads * 20):
                if done == reads:
                    break
                head = conn.refs.head(DB)
                assert head is not None
                version = max(1, head.version - rng.randint(1, 3))
                try:
                    db = conn.open_db(DB, version=version, lease=True)
                except NotFoundError as exc:
                    if "removed by retention" not in str(exc):
                        raise
                    skipped += 1  # trimmed between looking at the head and leasing: fine
                    continue
                with db:
                    first = db_digest(db)
                    lost = missing_blocks(conn.store, db.root)
                    if lost:
                        raise AssertionError(f"version {version}: blocks missing: {lost[:5]}")
                    sync.wait_at_least(COMMITS, sync.value(COMMITS) + 3, "3 more commits")
                    sync.add(READERS_WAITING)
                    try:
                        target = sync.value(GC_RUNS) + 2
                        sync.wait_at_least(GC_RUNS, target, "2 more collections")
                    finally:
                        sync.add(READERS_WAITING, -1)
                    lost = missing_blocks(conn.store, db.root)
                    if lost:
                        raise AssertionError(
                            f"leased version {version}: blocks missing after GC: {lost[:5]}"
                        )
                    again = db_digest(db)
                    if again != first:
                        raise AssertionError(f"leased version {version} read differently")
                    try:
                        conn.refs.get(DB, version)
                        trimmed = False
                    except NotFoundError:
                        trimmed = True
                results.put(("read", rid, version, first, trimmed))
                done += 1
            mine = [x for x in conn.leases.live("reader") if x.holder == conn.leases.holder]
            if mine:
                raise AssertionError(f"released reader leases are still live: {mine}")
    except BaseException as exc:
        report(exc)
    finally:
        results.put(("reader", rid, done, skipped))
        sync.add(READERS_DONE)
        results.put(("end", f"reader {rid}"))


def collector(uri: str, options: dict[str, Any], sync: Sync, results: Any) -> None:
    """Run ``merkle.gc(keep_versions=2, grace="0s")`` again and again until all are done.

    A run starts every two commits, or at once while a reader waits for one,
    or back to back once the writers are done; the loop ends after a run
    that started when every writer and reader had finished.
    """
    report = _report_errors(results, "collector")
    runs = 0
    try:
        with merkle.connect(uri, **options) as conn:
            sync.barrier.wait(WAIT)
            seen = [0]  # commits seen when the last run started

            def due() -> bool:
                return bool(
                    sync.counters[COMMITS] >= seen[0] + 2
                    or sync.counters[READERS_WAITING] > 0
                    or sync.counters[WRITERS_DONE] == sync.writers
                )

            while True:
                with sync.cond:
                    if not sync.cond.wait_for(due, timeout=WAIT):
                        raise TimeoutError("the collector waited too long for commits")
                    seen[0] = int(sync.counters[COMMITS])
                    last = (
                        sync.counters[WRITERS_DONE] == sync.writers
                        and sync.counters[READERS_DONE] == sync.readers
                    )
                try:
                    gc = merkle.gc(conn, keep_versions=2, grace="0s")
                except BaseException as exc:
                    report(exc)
                else:
                    trimmed = sum(d.versions_trimmed for d in gc.databases.values())
                    results.put(("gc", runs, gc.blocks_freed, trimmed, gc.reader_leases))
                runs += 1
                sync.add(GC_RUNS)
                if last:
                    break
    except BaseException as exc:
        report(exc)
        sync.add(GC_RUNS, 1000)  # let waiting readers go (and fail on their own checks)
    finally:
        results.put(("end", "collector"))


# -- workers of the crash tests ----------------------------------------------------


def crash_in_commit(
    uri: str, options: dict[str, Any], flushed: Any, never: Any, results: Any
) -> None:
    """Commit through the real path, but stop right before the journal entry until killed.

    The blocks are staged and flushed under the connection's writer lease;
    ``flushed`` is set when only the journal entry is left to write; then
    this process waits on ``never`` (an event nobody sets) until the parent
    kills it (SIGKILL): no entry, no lease release, no cleanup.
    """
    try:
        conn = merkle.connect(uri, **options)
        db = conn.open_db("shop")
        tag = os.urandom(8).hex()  # fresh content: every block of this commit is new
        rows = [{"id": 10_000 + i, "qty": i, "tag": f"{tag}-{i}"} for i in range(30)]
        db = db.write("orders", rows)

        # A commit writes its blocks in the same store call as its journal entry,
        # the entry last: write the blocks, then stop where the entry would go.
        def stop_before_entry(items: Any, key: str, data: bytes) -> bool:
            conn.store.put_many(items)
            flushed.set()
            never.wait()
            raise AssertionError("the parent should have killed this process")

        conn.store.put_if_absent_after = stop_before_entry  # type: ignore[method-assign]
        db.commit(message="never lands")
    except BaseException as exc:
        _report_errors(results, "crashing writer")(exc)
        flushed.set()


def put_and_exit(uri: str, options: dict[str, Any]) -> None:
    """Write blocks with the lake's BlockStore under a writer lease, then exit at once.

    ``os._exit`` skips every cleanup: the lease stays in the lake until it
    expires, and nothing is committed.
    """
    conn = merkle.connect(uri, **options)
    with conn.writer_lease("shop") as ticket:
        lease = ticket.lease
        blocks = [(os.urandom(2000), "raw") for _ in range(5)]
        raws = conn.blocks.put_many(blocks, refresh_before=lease.start)
        conn.blocks.put_node(
            {"type": "test/orphan", "v": 1, "parts": raws}, refresh_before=lease.start
        )
        os._exit(0)
