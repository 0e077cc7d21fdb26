"""Journals read while a collection trims them, and connections used across a fork.

* ``merkle.verify`` and a second ``merkle.gc`` audit a journal while another
  connection commits and collects (``keep_versions=1``): the audit must not
  call the healthy journal damaged (``merkle.refs.audit``).
* ``history()`` whose head is trimmed after its head lookup must read again
  from the new head, not say the database does not exist.
* A child forked from a process that used a connection must get a
  UsageError from the parent's connection (it hung: the store's thread pool
  has no workers in the child), be able to open its own, and never release
  its parent's leases.

The trims are made deterministic by running the other side at a chosen point
of the reader (a hook on its store or journal reader); the fork tests run real
forked processes, answer through a pipe, and are killed when they do not
answer within :data:`TIMEOUT` seconds, so a hang fails instead of blocking.
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import merkle
from merkle.cli.main import cli
from merkle.db.connection import Connection
from merkle.errors import UsageError
from merkle.refs.entry import journal_prefix, trimmed_key
from merkle.refs.reader import JournalReader

#: Seconds a forked child may take to answer (generous: the machine may be loaded).
TIMEOUT = 60.0
DB = "s"
FORK = multiprocessing.get_context("fork")


@pytest.fixture
def lake(tmp_path: Path) -> Iterator[tuple[str, Connection]]:
    """A file lake holding database ``s`` at version 1, and a connection to it."""
    uri = (tmp_path / "lake").as_uri()
    conn = merkle.connect(uri)
    conn.create_db(DB).create_table("t", key="k").write("t", [{"k": 0}]).commit()
    try:
        yield uri, conn
    finally:
        conn.close()


def commit_twice_and_collect(uri: str) -> None:
    """Another writer and collector: two commits, then a collection keeping one version."""
    with merkle.connect(uri) as other:
        for i in (1, 2):
            other.open_db(DB).write("t", [{"k": i}]).commit()
        report = merkle.gc(other, keep_versions=1, grace=datetime.timedelta(0))
        assert report.databases[DB].versions_trimmed == 3


# -- the audit beside a collection ---------------------------------------------------


def _after_listing(conn: Connection, act: Callable[[], None]) -> list[int]:
    """Run ``act`` once, right after ``conn`` lists the journal (the marker is read after)."""
    store, fired = conn.store, []
    listing = store.list

    def slow_list(prefix: str = "") -> Iterator[Any]:
        items = list(listing(prefix))
        if prefix == journal_prefix(DB) and not fired:
            fired.append(1)
            act()
        return iter(items)

    store.list = slow_list  # type: ignore[method-assign]
    return fired


def _after_floor(conn: Connection, act: Callable[[], None]) -> list[int]:
    """Run ``act`` once, right after ``conn`` reads the retention marker after a listing
    (before it reads the entries)."""
    store, fired, listed = conn.store, [], []
    listing, get = store.list, store.get

    def list_(prefix: str = "") -> Iterator[Any]:
        if prefix == journal_prefix(DB):
            listed.append(1)
        return listing(prefix)

    def slow_get(key: str) -> bytes:
        try:
            return get(key)  # (no marker yet: a NotFoundError, read as floor 0)
        finally:
            if key == trimmed_key(DB) and listed and not fired:
                fired.append(1)
                act()

    store.list = list_  # type: ignore[method-assign]
    store.get = slow_get  # type: ignore[method-assign]
    return fired


def _verify(conn: Connection) -> None:
    report = merkle.verify(conn, db=DB)
    assert report.journals_damaged == []
    assert report.ok


def _gc(conn: Connection) -> None:
    report = merkle.gc(conn, keep_versions=1, grace=datetime.timedelta(0))  # no JournalDamagedError
    assert report.databases[DB].head == 3


@pytest.mark.parametrize("when", [_after_listing, _after_floor], ids=["listing", "floor"])
@pytest.mark.parametrize("auditor", [_verify, _gc], ids=["verify", "gc"])
def test_an_audit_beside_a_collection_finds_the_journal_healthy(
    lake: tuple[str, Connection],
    when: Callable[[Connection, Callable[[], None]], list[int]],
    auditor: Callable[[Connection], None],
) -> None:
    uri, conn = lake
    fired = when(conn, lambda: commit_twice_and_collect(uri))
    auditor(conn)
    assert fired, "the other collection never ran"


# -- history beside a collection -----------------------------------------------------


@pytest.fixture
def trimmed_after_head(
    lake: tuple[str, Connection], monkeypatch: pytest.MonkeyPatch
) -> tuple[str, Connection, list[int]]:
    """Every journal reader of this process: right after its first head lookup of ``s``
    (from here on), another connection commits twice and collects (keep one version)."""
    uri, conn = lake
    head, fired = JournalReader.head, []

    def slow_head(self: JournalReader, db: str) -> Any:
        found = head(self, db)
        if db == DB and not fired:
            fired.append(1)
            commit_twice_and_collect(uri)
        return found

    monkeypatch.setattr(JournalReader, "head", slow_head)
    return uri, conn, fired


@pytest.mark.parametrize("limit", [None, 1, 5])
def test_history_whose_head_was_trimmed_reads_from_the_new_head(
    trimmed_after_head: tuple[str, Connection, list[int]], limit: int | None
) -> None:
    _, conn, fired = trimmed_after_head
    entries = conn.history(DB, limit)
    assert fired
    assert [e.version for e in entries] == [3]


@pytest.mark.parametrize("args", [["db", "log", DB], ["db", "list"]], ids=["log", "list"])
def test_db_commands_whose_head_was_trimmed_show_the_new_head(
    trimmed_after_head: tuple[str, Connection, list[int]], args: list[str]
) -> None:
    uri, _, fired = trimmed_after_head
    result = CliRunner().invoke(
        cli, ["--lake", uri, *args, "--format", "json"], env={"MERKLE_LAKE": None}
    )
    assert result.exit_code == 0, (result.output, result.exception)
    assert fired
    rows = json.loads(result.stdout)
    assert [row["version"] for row in rows] == [3]


# -- a connection across a fork --------------------------------------------------------


def _in_child(work: Callable[[], Any]) -> tuple[str, str]:
    """Run ``work`` in a forked child; its outcome ``(kind, text)``: ``("ok", repr)`` or
    ``(exception type, message)``. The child is killed if it does not answer in time."""
    receiver, sender = FORK.Pipe(duplex=False)

    def child() -> None:
        try:
            outcome = ("ok", repr(work()))
        except BaseException as exc:  # reported to the parent
            outcome = (type(exc).__name__, f"{exc}\n{traceback.format_exc()}")
        sender.send(outcome)

    process = FORK.Process(target=child, daemon=True)
    process.start()
    try:
        sender.close()
        if not receiver.poll(TIMEOUT):
            pytest.fail(f"the forked child gave no answer in {TIMEOUT:g} s: it hangs")
        kind, text = receiver.recv()
        process.join(TIMEOUT)
        assert process.exitcode == 0, process.exitcode
        return kind, text
    finally:
        if process.is_alive():
            process.kill()
        process.join(TIMEOUT)
        receiver.close()


@pytest.fixture
def busy(lake: tuple[str, Connection]) -> tuple[str, Connection, merkle.Database]:
    """The lake after the parent committed through it (its lease thread and pools running)."""
    uri, conn = lake
    db = conn.open_db(DB).write("t", [{"k": i} for i in range(10, 20)]).commit()
    conn.store.map_bulk(str, [1, 2, 3])  # the store's I/O pool and the table workers run
    conn.tables.map(str, [1, 2, 3])
    return uri, conn, db


USES: dict[str, Callable[[Connection, merkle.Database], Any]] = {
    "open_db": lambda conn, db: conn.open_db(DB),
    "history": lambda conn, db: conn.history(DB),
    "commit": lambda conn, db: db.write("t", [{"k": 99}]).commit(),
    "create_db": lambda conn, db: conn.create_db("child"),
    "store": lambda conn, db: conn.store.get_many([f"refs/{DB}/0", f"refs/{DB}/1"]),
    "tables": lambda conn, db: conn.tables.map(str, [1, 2, 3]),
}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # 3.12+: fork() with threads
@pytest.mark.parametrize("use", sorted(USES))
def test_a_forked_child_gets_an_error_from_its_parents_connection_and_opens_its_own(
    busy: tuple[str, Connection, merkle.Database], use: str
) -> None:
    uri, conn, db = busy
    key = 100 + sorted(USES).index(use)

    def work() -> int:
        with pytest.raises(UsageError, match="a fork") as refused:
            USES[use](conn, db)
        assert f"merkle.connect({uri!r})" in str(refused.value)
        with merkle.connect(uri) as own:  # its own connection works
            return own.open_db(DB).write("t", [{"k": key}]).commit().version

    kind, text = _in_child(work)
    assert kind == "ok", text
    assert key in conn.open_db(DB).get_records("t", [key])  # the child's commit landed
    conn.open_db(DB).write("t", [{"k": 98}]).commit()  # the parent goes on


def _close_in_child(conn: Connection, db: merkle.Database) -> None:
    conn.close()


def _exit_hooks_in_child(conn: Connection, db: merkle.Database) -> None:
    from merkle.db import readers
    from merkle.refs import writer

    writer._release_all()  # what the child's interpreter runs at exit
    readers._release_all()


def _drop_values_in_child(conn: Connection, db: merkle.Database) -> None:
    import gc

    db._reader.release()  # type: ignore[union-attr]  # as the value's finalizer does
    gc.collect()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # 3.12+: fork() with threads
@pytest.mark.parametrize(
    "end",
    [_close_in_child, _exit_hooks_in_child, _drop_values_in_child],
    ids=["close", "exit", "finalizer"],
)
def test_a_forked_child_does_not_release_its_parents_leases(
    busy: tuple[str, Connection, merkle.Database],
    end: Callable[[Connection, merkle.Database], None],
) -> None:
    _, conn, _ = busy
    leased = conn.open_db(DB, lease=True)
    with conn.writer_lease(DB):  # held by the parent across the fork
        before = {lease.id for lease in conn.leases.live()}
        assert len(before) >= 2, before  # a reader and a writer lease

        kind, text = _in_child(lambda: end(conn, leased))
        assert kind in ("ok", "UsageError"), text
        assert {lease.id for lease in conn.leases.live()} >= before
    leased.release()
