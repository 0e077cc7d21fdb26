"""Code run in child processes by the multi-process tests (importable under spawn)."""

from __future__ import annotations

import traceback
from typing import Any

from merkle.refs import JournalConflictError, RefManager
from merkle.storage import open_store

from .helpers import root


def commit_loop(
    uri: str,
    options: dict[str, Any],
    db: str,
    worker: int,
    commits: int,
    barrier: Any,
    results: Any,
) -> None:
    """Make ``commits`` commits to ``db``, retrying each on conflict; report the wins.

    Puts ``(worker, [(version, root), ...], conflicts, error)`` on ``results``.
    """
    wins: list[tuple[int, str]] = []
    conflicts = 0
    try:
        with open_store(uri, **options) as store:
            refs = RefManager(store)
            barrier.wait(timeout=120)
            for i in range(commits):
                mine = root((worker, i))
                while True:
                    head = refs.head(db)
                    assert head is not None
                    try:
                        entry = refs.commit(db, head.version, mine, author=f"w{worker}")
                    except JournalConflictError:
                        conflicts += 1
                        continue
                    wins.append((entry.version, mine))
                    break
    except BaseException:
        results.put((worker, wins, conflicts, traceback.format_exc()))
        return
    results.put((worker, wins, conflicts, None))
