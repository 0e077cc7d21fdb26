"""Reader leases that cannot be renewed, and transactions on re-created databases.

Issue 9, items 4 and 5. A reader lease whose renewal failed used to lapse
silently (``db.leased`` stayed true while GC freed the version); now the
keeper recovers it with a new lease when the version is still in the
journal, and otherwise marks it lapsed so the next read says so. A
transaction whose database was dropped and created again used to replay
onto the new database once retention had trimmed the drop from history;
the journal now records each incarnation's create entry.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import Lake

import merkle
from merkle.db.database import Database
from merkle.errors import ConflictError
from merkle.refs import Lease, LeaseExpiredError, LeaseManager
from merkle.refs.writer import WriterSession
from tests.refs.helpers import FakeClock

from .conftest import Connect


def two_versions(conn: merkle.Connection) -> merkle.Database:
    db = conn.create_db("shop").create_table("t", key="k")
    db = db.write("t", [{"k": 1, "v": "one"}]).commit()
    db.write("t", [{"k": 1, "v": "two"}]).commit()
    return db


def test_a_lease_whose_object_vanished_is_recovered_while_the_version_is_kept(
    lake: Lake, connect: Connect
) -> None:
    conn = connect(lake)
    old = two_versions(conn)
    with conn.open_db("shop", version=old.version, lease=True) as db:
        handle = db._reader
        assert handle is not None
        first = handle.lease
        conn.leases.release(first)  # reaped or lost: renewal now fails
        conn._readers.renew(handle)
        assert handle.lapsed is None
        assert handle.lease.id != first.id, "a new lease took its place"
        assert {lease.id for lease in conn.leases.live("reader")} == {handle.lease.id}
        assert db.leased
        assert db.get_records("t", [1]) == {1: {"k": 1, "v": "one"}}


def test_a_lease_that_lapsed_after_its_version_was_trimmed_fails_the_next_read(
    lake: Lake, connect: Connect
) -> None:
    conn = connect(lake)
    old = two_versions(conn)
    db = conn.open_db("shop", version=old.version, lease=True)
    handle = db._reader
    assert handle is not None
    conn.leases.release(handle.lease)  # the renewal thread could not keep it...
    conn.refs.trim("shop", old.version + 1)  # ...and retention trimmed the version meanwhile
    conn._readers.renew(handle)
    assert handle.lapsed is not None
    assert not db.leased
    with pytest.raises(LeaseExpiredError, match="lapsed") as info:
        db.get_records("t", [1])
    assert f"version {old.version}" in str(info.value)
    assert conn.leases.live("reader") == [], "the recovery lease was given back"
    db.release()


def test_a_failed_renewal_of_a_valid_lease_is_retried_not_dropped(
    lake: Lake, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = connect(lake)
    old = two_versions(conn)
    with conn.open_db("shop", version=old.version, lease=True) as db:
        handle = db._reader
        assert handle is not None

        def broken(*args: object, **kwargs: object) -> object:
            raise merkle.errors.StorageError("the store is down", definite=True)

        monkeypatch.setattr(conn.leases, "renew", broken)
        conn._readers.renew(handle)
        assert handle.lapsed is None, "still valid: the next round tries again"
        assert db.leased


def test_a_lease_taken_as_the_renewer_exits_is_still_renewed(lake: Lake, connect: Connect) -> None:
    """The start/exit race: hold() while the renewing thread is about to exit."""
    conn = connect(lake)
    old = two_versions(conn)
    keeper = conn._readers
    first = conn.open_db("shop", version=old.version, lease=True)
    thread = keeper._thread
    assert thread is not None
    first.release()  # wakes the thread: it finds nothing held and exits
    thread.join(30)
    assert not thread.is_alive()
    assert keeper._thread is None, "it said so under the lock before exiting"
    second = conn.open_db("shop", version=old.version, lease=True)
    assert keeper._thread is not None
    assert keeper._thread.is_alive(), "a new renewing thread serves the new lease"
    second.release()


def test_a_transaction_does_not_replay_onto_a_recreated_database(
    lake: Lake, connect: Connect
) -> None:
    conn, other = connect(lake), connect(lake)
    two_versions(conn)
    stale = conn.open_db("shop").create_table("extra", key="id").write("extra", [{"id": 1}])
    other.drop_db("shop")
    again = other.create_db("shop").create_table("t", key="k")
    again = again.write("t", [{"k": 5}]).commit()
    merkle.gc(other, keep_versions=1, grace="0s")  # the drop is trimmed from history
    assert len(other.history("shop")) == 1
    with pytest.raises(ConflictError, match="dropped and created again"):
        stale.commit(message="late")
    assert connect(lake).open_db("shop").list_tables() == ["t"]


def test_concurrent_commits_to_one_incarnation_still_replay(lake: Lake, connect: Connect) -> None:
    conn, other = connect(lake), connect(lake)
    two_versions(conn)
    mine = conn.open_db("shop").write("t", [{"k": 7, "v": "mine"}])
    other.open_db("shop").write("t", [{"k": 8, "v": "theirs"}]).commit()
    merkle.gc(other, keep_versions=1, grace="0s")
    done = mine.commit()
    assert done.get_records("t", [7, 8]) == {7: {"k": 7, "v": "mine"}, 8: {"k": 8, "v": "theirs"}}


def test_a_commit_that_outlasts_its_lease_ttl_lands_under_the_renewed_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found loading 30M rows (bench/scale.py): the commit checked the lease as granted,
    so one whose blocks took longer than the TTL less the skew margin failed with
    LeaseExpiredError although the connection's thread had kept renewing it."""
    clock = FakeClock()
    conn = merkle.connect(tmp_path)
    leases = LeaseManager(conn.store, clock=clock)
    conn.leases = leases
    conn._writer = WriterSession(leases, ttl=20.0)
    db = conn.create_db("shop").create_table("t", key="k")
    renewed = threading.Event()
    real_renew = LeaseManager.renew

    def renew(self: LeaseManager, lease: Lease, ttl: float) -> Lease:
        out = real_renew(self, lease, ttl)
        renewed.set()
        return out

    real_save = Database._save_root

    def slow_save(self: Database) -> Any:
        clock.now += 14.0  # past half the TTL and the margin: the thread renews it
        assert renewed.wait(30), "the writer lease was not renewed"
        clock.now += 6.0  # the lease as granted is now expired for its holder
        return real_save(self)

    monkeypatch.setattr(LeaseManager, "renew", renew)
    monkeypatch.setattr(Database, "_save_root", slow_save)
    db = db.write("t", [{"k": 1, "v": "one"}]).commit()
    monkeypatch.undo()
    assert conn.open_db("shop").get_records("t", [1]) == {1: {"k": 1, "v": "one"}}
    assert db.version == conn.open_db("shop").version
    conn.close()
