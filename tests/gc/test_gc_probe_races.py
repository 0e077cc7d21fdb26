"""Three findings of a multi-process probe (eighteenth session), made deterministic.

1. A tag of a version that a collection trimmed and swept between the tag
   resolving it and taking its writer lease was written, then refused: a
   collection marking tags in that moment met its missing blocks and stopped
   with "restore the block", although nothing kept was damaged.
2. ``verify`` running beside a collection reported the blocks of a version
   trimmed while it walked them as missing (``merkle verify`` exit 1 in a
   cron job next to ``merkle gc``).
3. A clone of a ``Database`` opened with a reader lease failed once retention
   trimmed its version, although the lease kept every block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aging import settle

import merkle
from merkle.db.connection import Connection
from merkle.errors import NotFoundError


def _lake(tmp_path: Path) -> tuple[merkle.Connection, merkle.Connection]:
    """A lake with version 1 of ``d`` (and a connection for collections)."""
    uri = tmp_path.as_uri()
    conn = merkle.connect(uri)
    conn.create_db("d").create_table("t", key="k").write("t", [{"k": 1, "v": "a"}]).commit()
    return conn, merkle.connect(uri)


def _move_on_and_collect(conn: merkle.Connection, collector: merkle.Connection) -> None:
    """Two more versions, then a collection keeping only the head: version 1's blocks go."""
    for value in ("b", "c"):
        conn.open_db("d").write("t", [{"k": 1, "v": value}]).commit()
    merkle.gc(collector, keep_versions=1, grace="0s")


def test_a_tag_of_a_version_swept_before_its_lease_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, collector = _lake(tmp_path)
    resolve, create = Connection._resolve, conn.tag_refs.create
    reports: list[Any] = []
    swept: list[bool] = []

    def resolved_then_swept(self: Connection, *args: Any, **kwargs: Any) -> Any:
        entry = resolve(self, *args, **kwargs)
        if not swept:
            swept.append(True)
            _move_on_and_collect(conn, collector)
        return entry

    def created_then_collected(*args: Any, **kwargs: Any) -> Any:
        made = create(*args, **kwargs)
        reports.append(merkle.gc(collector, keep_versions=1, grace="0s"))  # marks the tag
        return made

    monkeypatch.setattr(Connection, "_resolve", resolved_then_swept)
    monkeypatch.setattr(conn.tag_refs, "create", created_then_collected)
    with pytest.raises(NotFoundError, match="removed by retention"):
        conn.tag("d", "release")
    monkeypatch.undo()
    assert conn.tags("d") == []
    assert reports == []  # no tag of the swept version was ever there to be marked
    assert merkle.verify(conn).ok
    merkle.gc(collector, keep_versions=1, grace="0s")


def test_verify_beside_a_collection_does_not_report_a_trimmed_version_as_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn, collector = _lake(tmp_path)
    for value in ("b", "c"):
        conn.open_db("d").write("t", [{"k": 1, "v": value}]).commit()
    audit = conn.tag_refs.audit

    def listed_then_trimmed(*args: Any, **kwargs: Any) -> Any:
        # verify has listed every version of the journal: a collection trims all but the
        # head and frees their blocks before verify reads them.
        merkle.gc(collector, keep_versions=1, grace="0s")
        return audit(*args, **kwargs)

    monkeypatch.setattr(conn.tag_refs, "audit", listed_then_trimmed)
    report = merkle.verify(conn)
    assert report.ok, report.summary()
    assert report.trimmed_meanwhile > 0
    assert "not damage" in report.summary()


def test_verify_still_reports_a_block_missing_from_a_kept_version(tmp_path: Path) -> None:
    conn, _ = _lake(tmp_path)
    head = conn.open_db("d")
    leaf = next(p for p in (tmp_path / "blocks").iterdir() if p.name.startswith("bafk"))
    leaf.unlink()
    report = merkle.verify(conn)
    assert not report.ok
    assert report.missing == [(leaf.name, f"database 'd' version {head.version}")]


def test_a_clone_of_a_leased_version_works_after_retention_trimmed_it(tmp_path: Path) -> None:
    conn, collector = _lake(tmp_path)
    held = conn.open_db("d", lease=True)
    _move_on_and_collect(conn, collector)
    with pytest.raises(NotFoundError):
        conn.open_db("d", version=held.version)  # trimmed from the journal
    clone = conn.create_db("copy", root=held)
    assert clone.get_records("t", [1]) == {1: {"k": 1, "v": "a"}}
    assert conn.history("copy")[0].forked_from == {"db": "d", "version": held.version}
    held.release()
    with pytest.raises(NotFoundError, match="removed by retention"):
        conn.create_db("again", root=held)  # no lease keeps its blocks any more
    assert merkle.verify(conn).ok


def test_a_commit_whose_lease_lapsed_while_writing_lands_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer stalled past its lease while a bulk write's pages went to the lake early;
    a collection went on without it and removed them (their bytes had left memory). The
    commit raised LeaseExpiredError; it now builds the transaction again and lands."""
    import time
    from dataclasses import replace

    from merkle.refs import LeaseExpiredError

    conn, _ = _lake(tmp_path)
    collector = merkle.connect(tmp_path.as_uri())
    timing = collector.leases.timing
    collector.leases.timing = replace(timing, clock=lambda: time.time() + 200.0)
    rows = [{"k": i, "v": f"r{i}"} for i in range(60_000)]  # pages are written early
    db = conn.open_db("d").write("t", rows)
    check, lapsed = conn.leases.ensure_valid, []

    def lapse_once(lease: Any) -> None:
        if not lapsed:
            settle(collector)  # every block older than the grace, on any clock granularity
            lapsed.append(merkle.gc(collector, grace="0s"))  # our lease looks expired to it
            raise LeaseExpiredError(f"lease {lease.id} lapsed while its holder was stopped")
        check(lease)

    monkeypatch.setattr(conn.leases, "ensure_valid", lapse_once)
    committed = db.commit()
    monkeypatch.undo()
    assert lapsed[0].blocks_freed > 0  # the early pages were swept
    assert committed.version == conn.open_db("d").version  # after the collection's fence
    assert committed.describe_table("t")["count"] == 60_000
    assert merkle.verify(conn).ok
    reopened = merkle.connect(tmp_path.as_uri()).open_db("d")
    assert reopened.get_records("t", [59_999]) == {59_999: {"k": 59_999, "v": "r59999"}}
