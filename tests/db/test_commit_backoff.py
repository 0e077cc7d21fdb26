"""A commit that lost its compare-and-set lands while another writer commits back to back.

It replayed its changes on the new head and then slept its backoff before
trying to land: a writer committing meanwhile moved the head again every
time, and after every attempt the commit gave up with ConflictError (threads
probe of the twenty-third session). It sleeps first and replays on the head
found after the sleep.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import merkle


def test_a_commit_lands_though_another_writer_commits_during_each_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"file://{tmp_path}"
    with merkle.connect(uri) as ours, merkle.connect(uri) as theirs:
        ours.create_db("x").create_table("t", key="k").write("t", [{"k": 0}]).commit()
        pending = ours.open_db("x").write("t", [{"k": 1}])
        theirs.open_db("x").write("t", [{"k": 100}]).commit()  # our first landing fails
        busy = [0]

        def another_commit_meanwhile(seconds: float) -> None:
            busy[0] += 1
            theirs.open_db("x").write("t", [{"k": 100 + busy[0]}]).commit()

        monkeypatch.setattr(time, "sleep", another_commit_meanwhile)
        db = pending.commit()
        monkeypatch.undo()
        keys = [r["k"] for r in db.scan("t")]
        assert 1 in keys
        assert 100 in keys
        assert busy[0] >= 1
        assert ours.open_db("x").version == db.version
