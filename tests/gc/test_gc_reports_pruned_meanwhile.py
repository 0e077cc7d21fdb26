"""Reading the GC reports while a collection prunes old ones.

``load_reports`` lists ``gc/reports/`` and then reads each object; a
collection saving its report deletes all but the newest ``KEEP_REPORTS``
in between. A report pruned after the listing made the reader fail with
NotFoundError (``merkle gc --history`` beside a cron collection); it is now
left out, as if listed a moment later.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from merkle.gc.report import KEEP_REPORTS, REPORT_PREFIX, GCReport, load_reports
from merkle.storage.base import ObjectInfo
from merkle.storage.memory import MemoryStore


def _saved(store: MemoryStore, count: int) -> list[str]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        GCReport(dry_run=False, started_at=start + timedelta(seconds=i)).save(store)
        for i in range(count)
    ]


def test_a_report_pruned_between_the_listing_and_its_read_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore()
    keys = _saved(store, 3)
    listing = store.list

    def list_then_prune(prefix: str, *args: Any, **kwargs: Any) -> Iterator[ObjectInfo]:
        infos = list(listing(prefix, *args, **kwargs))
        if prefix == REPORT_PREFIX:
            store.delete_many([keys[0]])  # a collection's prune, after this listing
        return iter(infos)

    monkeypatch.setattr(store, "list", list_then_prune)
    loaded = load_reports(store)
    assert [report["started_at"] for report in loaded] == [
        datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC).isoformat() for s in (1, 2)
    ]


def test_a_collection_prunes_to_the_newest_reports() -> None:
    store = MemoryStore()
    keys = _saved(store, KEEP_REPORTS + 2)
    assert [info.key for info in store.list(REPORT_PREFIX)] == keys[2:]
    assert len(load_reports(store)) == KEEP_REPORTS
