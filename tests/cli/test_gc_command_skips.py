"""``merkle gc`` where a collection deletes nothing by design, as a script sees it.

Found by an operator-docs probe: a collection whose sweep was skipped (a live
writer outlasted the wait) printed, with ``-f jsonl`` (the default off a
terminal: cron, scripts), a record with no sign of it, exit 0: it looked like
a run that found nothing to free. And ``--dry-run --break-lock`` broke a live
collector's lock (a dry run takes no lock), stopping that collector.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

import merkle

from .helpers import Run


def _lock_objects(lake_uri: str) -> list[str]:
    folder = Path(lake_uri.removeprefix("file://")) / "gc" / "lock"
    return sorted(os.listdir(folder)) if folder.exists() else []


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_a_skipped_sweep_is_in_the_record_and_on_stderr(
    run: Run, lake_uri: str, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    with merkle.connect(lake_uri) as conn:
        db = conn.create_db("shop").create_table("t", key="id")
        for i in range(3):
            db = db.write("t", [{"id": i}]).commit()
    # The command waits a minute for writers; this test's writer outlasts no wait at all.
    monkeypatch.setattr(merkle, "gc", functools.partial(merkle.gc, writer_wait=0))
    with merkle.connect(lake_uri) as writer:
        lease = writer.leases.acquire_writer(30)
        try:
            result = run.ok("gc", "--keep-versions", "1", "--grace", "0s", "-f", fmt)
        finally:
            writer.leases.release(lease)
    assert "sweep skipped: 1 writer lease(s) still live" in result.stderr, result.stderr
    if fmt == "csv":
        header, row = result.stdout.splitlines()[:2]
        assert "sweep_skipped" in header.split(",")
        assert "writer lease(s) still live" in row
    else:
        record = json.loads(result.stdout)
        assert "writer lease(s) still live" in record["sweep_skipped"]
        assert record["blocks_freed"] == 0


def test_a_run_that_sweeps_says_no_skip(run: Run, lake_uri: str) -> None:
    with merkle.connect(lake_uri) as conn:
        conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
    result = run.ok("gc", "--grace", "0s", "-f", "jsonl")
    assert json.loads(result.stdout)["sweep_skipped"] is None
    assert "sweep skipped" not in result.stderr


def test_a_dry_run_refuses_to_break_the_lock(run: Run, lake_uri: str) -> None:
    with merkle.connect(lake_uri) as conn:
        conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
        lock = conn.leases.acquire_gc_lock(30)  # a live collector
        try:
            before = _lock_objects(lake_uri)
            result = run("gc", "--dry-run", "--break-lock")
            assert result.exit_code == 2, result.output
            assert "--break-lock" in result.stderr
            assert "dry run" in result.stderr
            assert _lock_objects(lake_uri) == before
            lock.ensure_held()  # the collector still holds its lock
        finally:
            lock.release()
