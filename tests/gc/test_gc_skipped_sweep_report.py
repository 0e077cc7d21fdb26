"""A collection whose sweep is skipped trims nothing, and its report says so.

When a writer lease outlives the collector's wait (or the retention policy
changed while it marked) the collection deletes and trims nothing
(doc/operations.md). Its report said "N trimmed" all the same, with an
``oldest_kept`` the journal no longer started at: an operator reading it
believed versions were gone that were still readable.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Lake
from gc_helpers import connect

import merkle
from merkle.gc import set_retention
from merkle.gc.report import GCReport, load_reports


def _history(conn: merkle.Connection, commits: int) -> list[merkle.Database]:
    db = conn.create_db("shop").create_table("t", key="id")
    versions = [db.commit()]
    for i in range(commits):
        versions.append(versions[-1].write("t", [{"id": i, "v": "x" * 50}]).commit())
    return versions


def _assert_nothing_trimmed(conn: merkle.Connection, report: GCReport, head: int) -> None:
    assert report.sweep_skipped is not None
    shop = report.databases["shop"]
    assert shop.versions_trimmed == 0, report.summary()
    assert shop.oldest_kept == 0
    assert shop.versions_kept == head + 1
    assert "0 trimmed" in report.summary()
    assert f"it would trim {head:,} versions" in report.sweep_skipped
    for version in range(head + 1):  # every version still opens
        conn.open_db("shop", version=version).list_tables()


def test_a_sweep_skipped_for_a_live_writer_reports_nothing_trimmed(lake: Lake) -> None:
    with connect(lake) as conn, connect(lake) as writer:
        versions = _history(conn, 4)
        lease = writer.leases.acquire_writer(30)
        try:
            report = merkle.gc(conn, keep_versions=1, grace="0s", writer_wait=0)
        finally:
            writer.leases.release(lease)
        _assert_nothing_trimmed(conn, report, versions[-1].version)
        (stored,) = [r for r in load_reports(conn.store) if r["databases"]]
        assert stored["databases"]["shop"]["versions_trimmed"] == 0
        # The next collection, with no writer at work, trims what was planned.
        again = merkle.gc(conn, keep_versions=1, grace="0s")
        assert again.sweep_skipped is None
        assert again.databases["shop"].versions_trimmed == versions[-1].version


def test_a_sweep_skipped_for_a_changed_policy_reports_nothing_trimmed(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(lake) as conn:
        versions = _history(conn, 3)
        set_retention(conn, keep_versions=1)
        real = conn.leases.acquire_gc_lock

        def change_first(*args: Any, **kwargs: Any) -> Any:
            # Between the collection's marking and its lock, another process keeps more.
            with connect(lake) as other:
                set_retention(other, keep_versions=1000, db="shop")
            return real(*args, **kwargs)

        monkeypatch.setattr(conn.leases, "acquire_gc_lock", change_first)
        report = merkle.gc(conn, grace="0s")
        assert "retention policy changed" in (report.sweep_skipped or "")
        _assert_nothing_trimmed(conn, report, versions[-1].version)
