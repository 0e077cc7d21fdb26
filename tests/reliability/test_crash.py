"""The crash test, short (CI): writers and collectors SIGKILLed at random, then the lake checked.

``crash.py`` holds the harness and says what is checked; ``make crash`` runs
the long series whose figures doc/reliability.md reports.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

import merkle
from merkle.db.connection import Connection
from merkle.storage import open_store

from . import crash_workers
from .crash import CHECKER_AHEAD, JOIN, run_crash_trials
from .crash_workers import GC_SETTINGS, KEPT, connect_short


@pytest.mark.slow
def test_killed_writers_and_collectors_lose_no_acknowledged_version(tmp_path: Path) -> None:
    figures = run_crash_trials(tmp_path, trials=3, seconds=2.5, writers=2, collectors=1, seed=9)
    assert figures.problems == []
    assert figures.broken == 0
    assert figures.trials == 3
    assert figures.kills > 3  # more than the final kill of each trial
    assert figures.acknowledged > 0
    assert figures.versions_checked > 0


def temp_files(root: Path) -> list[str]:
    return [name for _, _, names in os.walk(root) for name in names if name.startswith(".tmp-")]


def test_gc_removes_the_temporary_files_of_a_killed_writer(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with Connection(open_store(lake)) as conn:
        conn.create_db(KEPT).create_table("t", key="id").commit()
    ctx = multiprocessing.get_context("spawn")
    stalled = ctx.Event()
    child = ctx.Process(target=crash_workers.stall_in_rename, args=(lake.as_uri(), stalled))
    child.start()
    try:
        assert stalled.wait(JOIN), "the writer never reached its block renames"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(JOIN)
    assert child.exitcode == -signal.SIGKILL
    assert temp_files(lake), "the killed writer left no temporary file"

    # An hour later by the collector's clock: past the grace period and the dead lease.
    # Temporaries are aged on the storage's clock (doc/operations.md, "Clean up"), not
    # the collector's, so the hour passes for them on disk too.
    then = time.time() - CHECKER_AHEAD
    for directory, _, names in os.walk(lake):
        for name in names:
            if name.startswith(".tmp-"):
                os.utime(os.path.join(directory, name), (then, then))
    checker = connect_short(lake.as_uri(), clock=lambda: time.time() + CHECKER_AHEAD)
    try:
        merkle.gc(checker, **GC_SETTINGS)
    finally:
        checker.close()
    assert temp_files(lake) == []
