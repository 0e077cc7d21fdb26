"""Dry runs, repeated runs, stored reports and bad arguments.

The history is written by a connection that is closed before collecting, so
no writer lease is live: a dry run and a real run then see the same lake and
must agree block for block.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import Lake
from gc_helpers import backdate, block_keys, build_history, connect, objects, reachable, settle

import merkle
from merkle.blocks.store import BLOCK_PREFIX
from merkle.errors import UsageError
from merkle.gc import load_reports, set_retention
from merkle.gc.report import REPORT_PREFIX


def _without_gc_state(lake_objects: dict[str, bytes]) -> dict[str, bytes]:
    """The lake's data: everything but GC's own lock generations and reports."""
    return {k: v for k, v in lake_objects.items() if not k.startswith("gc/")}


def test_a_dry_run_deletes_nothing_and_names_what_a_real_run_then_deletes(lake: Lake) -> None:
    with connect(lake) as conn:
        versions = build_history(conn, commits=5)
        other = build_history(conn, "other", commits=2)
        conn.drop_db("other")
    with connect(lake) as conn:
        before = objects(conn.store)
        dry = merkle.gc(conn, dry_run=True, keep_versions=2, grace="0s")
        after = objects(conn.store)
        # Nothing deleted, trimmed or rewritten: the only new object is the dry run's report.
        assert dry.report_key is not None
        assert set(after) - set(before) == {dry.report_key}
        assert after == {**before, dry.report_key: after[dry.report_key]}
        assert dry.dry_run
        assert dry.report_key is not None
        assert dry.report_key.endswith("-dry-run")
        assert dry.blocks_freed == len(dry.freed) > 0
        assert dry.databases["shop"].versions_trimmed == len(versions) - 2

        real = merkle.gc(conn, keep_versions=2, grace="0s")
        assert set(real.freed) == set(dry.freed)
        assert (real.blocks_freed, real.bytes_freed) == (dry.blocks_freed, dry.bytes_freed)
        assert (real.blocks_kept, real.bytes_kept) == (dry.blocks_kept, dry.bytes_kept)
        assert block_keys(conn.store) == block_keys_of(before) - set(dry.freed)
        # What is left is exactly what the two kept versions of each journal reach ("other"
        # keeps its drop entry, which has no root, and its last live version).
        roots = [v.root for v in versions[-2:]] + [other[-1].root]
        assert block_keys(conn.store) == reachable(conn.store, roots)

        settled = _without_gc_state(objects(conn.store))
        again = merkle.gc(conn, keep_versions=2, grace="0s")
        assert (again.blocks_freed, again.bytes_freed, again.freed) == (0, 0, [])
        assert again.databases["shop"].versions_trimmed == 0
        assert _without_gc_state(objects(conn.store)) == settled
        dry_after = merkle.gc(conn, dry_run=True, keep_versions=2, grace="0s")
        assert dry_after.freed == []
        assert merkle.verify(conn).ok


def block_keys_of(lake_objects: dict[str, bytes]) -> set[str]:
    return {k[len("blocks/") :] for k in lake_objects if k.startswith("blocks/")}


def test_a_second_run_changes_nothing_at_all(lake: Lake) -> None:
    with connect(lake) as conn:
        build_history(conn, commits=4)
        # S3 keeps timestamps in whole seconds: a block written in the second the first
        # collection reads the storage's clock counts as new and is left to the second
        # (a failure of a clean-clone run). Every block older than the grace instead.
        backdate(
            conn.store, [BLOCK_PREFIX + cid for cid in block_keys(conn.store)], time.time() - 7200
        )
    with connect(lake) as conn:
        first = merkle.gc(conn, keep_versions=1, grace="0s")
        assert first.blocks_freed > 0
        settled = _without_gc_state(objects(conn.store))
        second = merkle.gc(conn, keep_versions=1, grace="0s")
        assert (second.blocks_freed, second.freed) == (0, [])
        assert _without_gc_state(objects(conn.store)) == settled


def test_the_report_is_stored_under_gc_reports_and_loaded_back(lake: Lake) -> None:
    with connect(lake) as conn:
        build_history(conn, commits=3)
    with connect(lake) as conn:
        dry = merkle.gc(conn, dry_run=True, keep_versions=1, grace="0s")
        real = merkle.gc(conn, keep_versions=1, grace="0s")
        keys = [info.key for info in conn.store.list(REPORT_PREFIX)]
        assert dry.report_key is not None
        assert real.report_key is not None
        assert keys == sorted([dry.report_key, real.report_key])
        assert all(key.startswith("gc/reports/") for key in keys)
        loaded = load_reports(conn.store)
    assert [r["dry_run"] for r in loaded] == [True, False]
    stored: dict[str, Any] = loaded[1]
    assert stored["type"] == "merkle/gc-report"
    assert stored["blocks_freed"] == real.blocks_freed > 0
    assert stored["bytes_freed"] == real.bytes_freed
    assert stored["blocks_kept"] == real.blocks_kept
    assert sorted(stored["freed"]) == sorted(real.freed)
    assert stored["databases"]["shop"]["versions_trimmed"] == 4
    assert stored["grace_seconds"] == 0
    assert "newest 1" in stored["retention"]
    assert "freed" in real.summary()
    assert "would free" in dry.summary()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"keep_versions": 0}, "keep_versions"),
        ({"keep_versions": -1}, "keep_versions"),
        ({"keep_versions": 1.5}, "keep_versions"),
        ({"keep_versions": True}, "keep_versions"),
        ({"keep_within": "7x"}, "duration"),
        ({"keep_within": ""}, "duration"),
        ({"keep_within": "-7d"}, "duration"),
        ({"grace": "-1h"}, "duration"),
        ({"grace": "1 hour"}, "duration"),
        ({"keep_within": 7}, "duration"),
    ],
)
def test_bad_arguments_are_usage_errors_and_touch_nothing(
    lake: Lake, kwargs: dict[str, Any], match: str
) -> None:
    with connect(lake) as conn:
        build_history(conn, commits=2)
    with connect(lake) as conn:
        before = objects(conn.store)
        with pytest.raises(UsageError, match=match):
            merkle.gc(conn, **kwargs)
        with pytest.raises(UsageError, match=match):
            merkle.gc(conn, dry_run=True, **kwargs)
        assert objects(conn.store) == before  # no lock, no report, no trim


@pytest.mark.parametrize(
    "kwargs",
    [
        {"keep_versions": 0},
        {"keep_within": "7x"},
        {"grace": "-1h"},
        {"keep_versions": 2, "db": "bad/name"},
    ],
)
def test_bad_retention_settings_are_usage_errors(lake: Lake, kwargs: dict[str, Any]) -> None:
    with connect(lake) as conn:
        with pytest.raises(UsageError):
            set_retention(conn, **kwargs)
        assert list(conn.store.list("gc/")) == []


def test_a_dry_run_on_the_connection_that_just_committed_agrees_with_the_real_run(
    lake: Lake,
) -> None:
    with connect(lake) as conn:
        build_history(conn, commits=4)
        settle(conn)
        dry = merkle.gc(conn, dry_run=True, keep_versions=1, grace="0s")
        real = merkle.gc(conn, keep_versions=1, grace="0s")
        assert real.blocks_freed > 0
        assert set(dry.freed) == set(real.freed)


def test_a_dry_run_on_a_lake_it_cannot_write_still_reports(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run failed on a read-only lake only because it could not save its report."""
    from merkle.errors import StorageError
    from merkle.gc.report import GCReport

    def refuse(self: GCReport, store: Any) -> str:
        raise StorageError("cannot write 'gc/reports/x': Read-only file system")

    with connect(lake) as conn:
        build_history(conn)
        monkeypatch.setattr(GCReport, "save", refuse)
        report = merkle.gc(conn, dry_run=True, keep_versions=1, grace="0s")
        assert report.blocks_freed > 0
        assert any("report was not saved" in note for note in report.notes), report.notes
        with pytest.raises(StorageError, match="Read-only"):
            merkle.gc(conn, keep_versions=1, grace="0s")
