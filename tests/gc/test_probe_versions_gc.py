"""Retention, durations and the GC lock wait, as an adversarial probe found them.

1. ``set_retention(conn, db="audit", grace="2h")`` removed audit's override (the
   next collection trimmed audit to the lake default), and
   ``set_retention(conn, grace="30m")`` reset the lake default to keep every
   version: giving only ``grace`` now leaves every retention as it is.
2. Durations were read case-insensitively: ``keep_within="6M"`` (six months?)
   meant six minutes, and trimmed an hour of history. Units are lower case;
   ``M`` is refused saying why, and so is a unit given twice (``1h1h``), by the
   one parser the API and the command line share.
3. A collection that found another holding the GC lock waited up to a minute
   in silence; it now says who holds it, until when and what to do.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

import merkle
from merkle.errors import UsageError
from merkle.gc import get_policy, set_retention
from merkle.gc.policy import Retention, parse_duration
from merkle.refs import LeaseManager


def connect(path: Path) -> merkle.Connection:
    """A file lake: what is tested here is the same on every backend."""
    return merkle.connect(path.as_uri())


def _history(conn: merkle.Connection, name: str, commits: int) -> None:
    db = conn.create_db(name).create_table("t", key="k")
    for i in range(commits):
        db = db.write("t", [{"k": i}]).commit()


def test_grace_alone_keeps_a_databases_override_and_the_default(tmp_path: Path) -> None:
    with connect(tmp_path) as conn:
        _history(conn, "audit", 5)
        set_retention(conn, keep_versions=1)
        set_retention(conn, keep_versions=100, db="audit")
        policy = set_retention(conn, db="audit", grace="2h")
        assert policy.databases == {"audit": Retention(keep_versions=100)}
        assert policy.grace == timedelta(hours=2)
        set_retention(conn, grace="30m")
        stored = get_policy(conn)
        assert stored.default == Retention(keep_versions=1)
        assert stored.databases == {"audit": Retention(keep_versions=100)}
        assert stored.grace == timedelta(minutes=30)
        merkle.gc(conn)
        assert len(conn.history("audit")) == 6, "the override still keeps every version"
        # Naming no limit still removes the override on purpose (and keeps the grace).
        policy = set_retention(conn, db="audit")
        assert policy.databases == {}
        assert policy.default == Retention(keep_versions=1)
        assert policy.grace == timedelta(minutes=30)
        merkle.gc(conn)
        assert [e.version for e in conn.history("audit")] == [5]
        assert set_retention(conn).default == Retention(), "the default: every version again"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("6M", "'M' is not a unit (months? minutes?): write 6m for minutes"),
        ("7D", "units are lower case: write 7d, not 7D"),
        ("1H30m", "units are lower case: write 1h, not 1H"),
        ("1h1h", "gives the unit 'h' more than once"),
        ("1d2h1d", "gives the unit 'd' more than once"),
        ("1y", "'y' is not a unit"),
        ("90", "90 has no unit"),
    ],
)
def test_a_duration_takes_lower_case_units_each_once(text: str, expected: str) -> None:
    with pytest.raises(UsageError, match="bad duration") as info:
        parse_duration(text, "keep_within")
    assert expected in str(info.value)
    assert "keep_within (--keep-within)" in str(info.value)


def test_set_retention_refuses_six_capital_m_and_stores_nothing(tmp_path: Path) -> None:
    with connect(tmp_path) as conn:
        set_retention(conn, keep_versions=3)
        with pytest.raises(UsageError, match="months are not a unit"):
            set_retention(conn, keep_within="6M")
        with pytest.raises(UsageError, match="more than once"):
            merkle.gc(conn, keep_within="1h1h", dry_run=True)
        assert get_policy(conn).default == Retention(keep_versions=3)
        # What was always valid still is.
        assert parse_duration("1h30m", "grace") == timedelta(minutes=90)
        assert parse_duration(" 2w3d ", "grace") == timedelta(days=17)
        assert parse_duration("30m5s", "grace") == timedelta(seconds=1805)
        assert parse_duration("1.5h", "grace") == timedelta(minutes=90)


def test_a_collection_says_who_holds_the_gc_lock_when_it_starts_waiting(tmp_path: Path) -> None:
    """The other holder's lock is released from inside the notice: no sleeping."""
    with connect(tmp_path) as conn:
        _history(conn, "shop", 1)
        other = LeaseManager(conn.store, holder="elsewhere:4242")
        held = other.acquire_gc_lock(30.0)
        heard: list[str] = []

        def notify(message: str) -> None:
            heard.append(message)
            held.release()  # the other collection ends: this one goes on

        report = merkle.gc(conn, notify=notify)
        assert not report.sweep_skipped
        assert len(heard) == 1, heard
        assert heard[0].startswith("waiting for the GC lock (at most 60s)")
        assert f"elsewhere:4242 (generation {held.generation})" in heard[0]
        assert "merkle gc --break-lock" in heard[0]
        heard.clear()
        merkle.gc(conn, notify=heard.append)
        assert heard == [], "no other holder, no wait, no notice"


def test_a_closed_connection_refuses_a_collection(tmp_path: Path) -> None:
    conn = connect(tmp_path)
    _history(conn, "shop", 1)
    conn.close()
    with pytest.raises(UsageError, match="is closed"):
        merkle.gc(conn)
    with pytest.raises(UsageError, match="is closed"):
        merkle.verify(conn)
