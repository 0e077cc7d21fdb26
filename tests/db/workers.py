"""Code that the multi-process tests run in child processes (importable under "spawn").

Each worker opens its own connection from the lake's URI and options, does
its part, and puts one report on a queue: ``(result, None)`` or
``(None, traceback)``, so a failure in a child shows in the test.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import merkle
from merkle.errors import MerkleError


def _report(results: Any, work: Callable[[], Any]) -> None:
    try:
        result = work()
    except BaseException:
        results.put((None, traceback.format_exc()))
        return
    results.put((result, None))


def commit_disjoint(
    uri: str,
    options: dict[str, Any],
    worker: int,
    commits: int,
    barrier: Any,
    results: Any,
) -> None:
    """Commit ``commits`` times to table 't' of database 'race', one new key each time.

    Each commit also writes the shared key -1 with its own label, and labels
    itself in the commit message, so the test can tell which commit's write
    to the shared key is visible in each version. Reports the labels and the
    versions they were committed as.
    """

    def work() -> list[tuple[str, int]]:
        won = []
        with merkle.connect(uri, **options) as conn:
            db = conn.open_db("race")
            barrier.wait(timeout=120)
            for i in range(commits):
                label = f"w{worker}-{i}"
                db = db.write("t", [{"k": worker * 1000 + i, "w": worker, "i": i}])
                db = db.write("t", [{"k": -1, "last": label}])
                db = db.commit(message=label, author=f"worker {worker}")
                won.append((label, db.version))
        return won

    _report(results, work)


#: Steps of :func:`run_steps`: ("write", table, records), ("delete", table, keys),
#: ("drop_table", table), ("create_table", table, key), ("meta", value),
#: ("commit", message).
Step = tuple[Any, ...]


def run_steps(
    uri: str, options: dict[str, Any], db_name: str, steps: list[Step], results: Any
) -> None:
    """Open ``db_name``, apply ``steps`` in order, and report the versions committed.

    A value left uncommitted at the end is simply dropped when the process
    exits: what it held must never reach the lake.
    """

    def work() -> list[int]:
        committed = []
        with merkle.connect(uri, **options) as conn:
            db = conn.open_db(db_name)
            for step in steps:
                kind, *args = step
                if kind == "write":
                    db = db.write(args[0], args[1])
                elif kind == "delete":
                    db = db.delete(args[0], args[1])
                elif kind == "drop_table":
                    db = db.drop_table(args[0])
                elif kind == "create_table":
                    db = db.create_table(args[0], key=args[1])
                elif kind == "meta":
                    value = args[0]
                    db = db.alter_db_meta(lambda _m, v=value: v)
                elif kind == "commit":
                    db = db.commit(message=args[0])
                    committed.append(db.version)
                else:
                    raise ValueError(f"unknown step {kind!r}")
        return committed

    _report(results, work)


def read_state(uri: str, options: dict[str, Any], db_name: str, results: Any) -> None:
    """Report what a fresh connection sees of ``db_name``: dbs, history, tables, records."""

    def work() -> dict[str, Any]:
        with merkle.connect(uri, **options) as conn:
            try:
                db = conn.open_db(db_name)
            except MerkleError as exc:
                return {"error": f"{type(exc).__name__}: {exc}"}
            return state_of(conn, db)

    _report(results, work)


def state_of(conn: merkle.Connection, db: merkle.Database) -> dict[str, Any]:
    """Everything one can read of a database version (and of the lake's list of databases)."""
    return {
        "dbs": conn.list_dbs(),
        "history": [(e.version, e.root, e.message, e.author) for e in conn.history(db.name)],
        "version": db.version,
        "root": db.root,
        "metadata": db.describe()["metadata"],
        "tables": {
            name: {
                "records": list(db.scan(name)),
                "count": db.describe_table(name)["count"],
                "metadata": db.describe_table(name)["metadata"],
            }
            for name in db.list_tables()
        },
    }


@contextlib.contextmanager
def spawned(target: Callable[..., None], *arg_lists: tuple[Any, ...]) -> Iterator[Any]:
    """Start one process per argument tuple, running ``target(*args, results)``.

    Yields the results queue. The processes are spawned (a clean interpreter,
    as on macOS and Windows), and they are all stopped before the block ends.
    Read the reports from the queue inside the block: a child exits only
    once what it put on the queue has been taken.
    """
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, results)) for args in arg_lists]
    for proc in procs:
        proc.start()
    try:
        yield results
        for proc in procs:
            proc.join(timeout=120)
            assert proc.exitcode == 0, f"child exited with {proc.exitcode}"
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        results.close()
        results.join_thread()


def run_one(target: Callable[..., None], *args: Any) -> Any:
    """Run ``target(*args, results)`` in one spawned process and return what it reports."""
    with spawned(target, args) as results:
        result, error = results.get(timeout=300)
    assert error is None, error
    return result
