"""Real processes racing to commit to one database: the journal stays one clean chain.

Each process commits with retry-on-conflict; afterwards versions 1..N are
contiguous, every successful commit appears exactly once at the version it
was told with its own root (so no entry was overwritten), parents form a
chain and times never run backwards.
"""

from __future__ import annotations

import multiprocessing

import pytest
from conftest import Lake

from merkle.refs import RefManager

from .helpers import root
from .workers import commit_loop


def race(lake: Lake, workers: int, commits: int) -> list[tuple[int, list[tuple[int, str]], int]]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=commit_loop,
            args=(lake.uri, lake.options, "race", w, commits, barrier, results),
        )
        for w in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        reports = [results.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
            assert proc.exitcode == 0
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    errors = [error for _, _, _, error in reports if error]
    assert not errors, errors[0]
    return [(worker, wins, conflicts) for worker, wins, conflicts, _ in reports]


#: Processes x commits each, per backend.
SIZES = {"file": (8, 50), "s3": (4, 25)}


@pytest.mark.slow
def test_racing_processes_build_one_chain(shared_lake: Lake) -> None:
    workers, commits = SIZES[shared_lake.kind]
    with shared_lake.open() as store:
        RefManager(store).commit("race", None, root("genesis"))
    # On S3, the moto_endpoint fixture makes moto's conditional puts atomic, as S3's are.
    reports = race(shared_lake, workers, commits)

    total = workers * commits
    won: dict[int, str] = {}
    for worker, wins, _ in reports:
        assert len(wins) == commits, f"worker {worker} finished all its commits"
        for version, mine in wins:
            assert version not in won, f"version {version} was won twice"
            won[version] = mine
    assert sorted(won) == list(range(1, total + 1)), "versions 1..N, contiguous"
    assert sum(conflicts for _, _, conflicts in reports) > 0, "the processes did race"

    with shared_lake.open() as store:
        refs = RefManager(store)
        history = refs.history("race")
    assert [entry.version for entry in history] == list(range(total, -1, -1))
    for entry in history[:-1]:
        assert entry.root == won[entry.version], f"version {entry.version} holds its winner"
        assert entry.parent == entry.version - 1
    assert len({entry.root for entry in history}) == total + 1, "every root exactly once"
    times = [entry.time for entry in reversed(history)]
    assert times == sorted(times)
