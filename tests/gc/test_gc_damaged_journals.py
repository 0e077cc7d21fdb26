"""A hint, a marker or a gap is never a reason to delete (issue 9, item 1).

Each case below was a data-loss bug: a lake copied while a writer ran holds a
HEAD newer than its newest entry (GC then deleted every block); a journal
with a middle entry missing made history stop at the gap (GC freed the
blocks of the live entries below it); a retention marker above the head made
GC keep only the head. Now the head is always an entry read from its slot,
and a gap, an inconsistent marker or entries mixed from different copies is
damage that ``verify`` reports and that stops GC before it deletes anything.
"""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner
from conftest import Lake
from gc_helpers import backdate, block_keys, build_history, connect

import merkle
from merkle.cli.main import cli
from merkle.errors import IntegrityError
from merkle.refs import JournalDamagedError
from merkle.refs.entry import entry_key, head_key, trimmed_key
from merkle.storage import ObjectStore


def aged_history(lake: Lake) -> tuple[merkle.Connection, list[merkle.Database]]:
    """Versions 0..7 of 'shop', every block older than the default grace period."""
    conn = connect(lake)
    versions = build_history(conn, commits=6)
    backdate(conn.store, [f"blocks/{cid}" for cid in block_keys(conn.store)], time.time() - 7200)
    return conn, versions


def data(store: ObjectStore) -> dict[str, bytes]:
    """The blocks and journals of a lake (leases come and go on their own)."""
    return {
        info.key: store.get(info.key)
        for prefix in ("blocks/", "refs/")
        for info in store.list(prefix)
    }


def readable(lake: Lake, version: int) -> bool:
    with connect(lake) as conn:
        db = conn.open_db("shop", version=version)
        return all(db.to_arrow(t).num_rows >= 0 for t in db.list_tables())


def test_a_head_hint_ahead_of_the_journal_is_ignored(lake: Lake) -> None:
    conn, versions = aged_history(lake)
    store = conn.store
    # A copy tool listed entries 0-5, then copied HEAD after a writer made 6 and 7.
    store.put_hint(head_key("shop"), store.get(entry_key("shop", 7)))
    store.delete(entry_key("shop", 7))
    store.delete(entry_key("shop", 6))
    with connect(lake) as fresh:
        assert fresh.open_db("shop").version == 5
        assert fresh.refs.head("shop") == versions[5].entry
        report = merkle.verify(fresh)
        assert report.ok
        assert report.versions_checked == 6
        assert any("HEAD hint names version 7" in note for note in report.notes)
        gc_report = merkle.gc(fresh)
        assert any("HEAD hint" in note for note in gc_report.notes)
    for version in range(6):
        assert readable(lake, version), f"version {version} lost its blocks"


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("gap", "entry 3 is missing between the retention floor"),
        ("marker", "the retention marker names version 20, above the newest entry"),
        ("garbage-marker", "retention marker 'refs/shop/TRIMMED' is damaged"),
    ],
)
def test_a_damaged_journal_stops_gc_before_it_deletes_anything(
    lake: Lake, damage: str, problem: str
) -> None:
    conn, _ = aged_history(lake)
    store = conn.store
    if damage == "gap":
        store.delete(entry_key("shop", 3))
    elif damage == "marker":
        store.put(trimmed_key("shop"), b"20")
    else:
        store.put(trimmed_key("shop"), b"\x00garbage")
    before = data(store)
    with connect(lake) as fresh:
        report = merkle.verify(fresh)
        assert not report.ok
        assert any(problem in text for _, text in report.journals_damaged)
        for dry_run in (True, False):
            with pytest.raises(JournalDamagedError, match="'shop'") as info:
                merkle.gc(fresh, dry_run=dry_run, keep_versions=1, grace="0s")
            assert problem in str(info.value)
    assert data(store) == before, "nothing deleted or trimmed"
    if damage == "gap":
        with connect(lake) as fresh, pytest.raises(IntegrityError, match="missing"):
            fresh.history("shop")


def test_entries_mixed_from_two_copies_are_damage(lake: Lake) -> None:
    conn, versions = aged_history(lake)
    other = connect(lake.__class__(lake.kind, lake.uri.rstrip("/") + "-other", lake.options))
    try:
        twin = build_history(other, commits=6)
        assert twin[4].entry.digest != versions[4].entry.digest
        # Entry 4 comes from another lake's history: entry 5 was not built on it.
        conn.store.put(entry_key("shop", 4), other.store.get(entry_key("shop", 4)))
    finally:
        other.close()
    with connect(lake) as fresh:
        report = merkle.verify(fresh)
        assert any("entry 5 was not built on the entry 4" in t for _, t in report.journals_damaged)
        with pytest.raises(JournalDamagedError):
            merkle.gc(fresh, keep_versions=1, grace="0s")


def test_the_cli_reports_journal_damage_in_one_line(lake: Lake) -> None:
    if lake.kind == "memory":
        pytest.skip("the CLI opens the lake by URI in a fresh process state")
    conn, _ = aged_history(lake)
    conn.store.delete(entry_key("shop", 3))
    args = ["--lake", lake.uri]
    for key, value in lake.options.items():
        args += ["-o", f"{key}={value}"]
    runner = CliRunner()
    verify = runner.invoke(cli, [*args, "verify"])
    assert verify.exit_code == 1, verify.output
    assert "the journal of 'shop' is damaged (entry 3 is missing" in verify.output
    collect = runner.invoke(cli, [*args, "gc", "--keep-versions", "1"])
    assert collect.exit_code == 1
    lines = [line for line in collect.output.splitlines() if line.strip()]
    assert len(lines) == 1, collect.output
    assert "'shop'" in lines[0]
    assert "deleted and trimmed nothing" in lines[0]
