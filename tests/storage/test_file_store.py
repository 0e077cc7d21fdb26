"""What only a local-file store must show: real processes racing, crashes, fsync order."""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from merkle.errors import UsageError
from merkle.storage import open_store
from merkle.storage.file import FileStore

from .workers import big_object, overwrite_until_stalled, race_put_if_absent

SPAWN = multiprocessing.get_context("spawn")
CHILD_TIMEOUT = 120  # seconds: a bound on a hung child, not a performance threshold


def hidden_files(root: str) -> list[str]:
    return [
        os.path.join(directory, name)
        for directory, _, names in os.walk(root)
        for name in names
        if name.startswith(".")
    ]


@pytest.mark.slow
def test_put_if_absent_raced_by_processes(file_store: FileStore) -> None:
    contenders = 6
    barrier = SPAWN.Barrier(contenders)
    results = SPAWN.Queue()
    key = "refs/db/00000000000000000001"
    processes = [
        SPAWN.Process(
            target=race_put_if_absent,
            args=(file_store.uri, file_store.reopen_options(), key, n, barrier, results),
        )
        for n in range(contenders)
    ]
    for process in processes:
        process.start()
    try:
        outcomes = dict(results.get(timeout=CHILD_TIMEOUT) for _ in processes)
    finally:
        for process in processes:
            process.join(CHILD_TIMEOUT)
            if process.is_alive():
                process.kill()
                process.join()
    assert [p.exitcode for p in processes] == [0] * contenders
    winners = [writer for writer, won in outcomes.items() if won]
    assert len(outcomes) == contenders
    assert len(winners) == 1, outcomes
    assert file_store.get(key) == f"process-{winners[0]}".encode()
    assert hidden_files(file_store.root) == []


@pytest.mark.slow
def test_sigkill_mid_put_leaves_old_or_new_bytes_in_full(file_store: FileStore) -> None:
    key = "blocks/big"
    stall_at = 4
    file_store.put(key, big_object(0))
    receiver, sender = SPAWN.Pipe(duplex=False)
    child = SPAWN.Process(
        target=overwrite_until_stalled, args=(file_store.uri, key, stall_at, sender)
    )
    child.start()
    sender.close()
    reports: list[tuple[str, int]] = []
    try:
        # Puts 1..3 complete; put 4 hangs with half its bytes written; then it dies.
        while not reports or reports[-1][0] != "stalled":
            assert receiver.poll(CHILD_TIMEOUT), "the writer process stopped reporting"
            reports.append(receiver.recv())
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
    finally:
        child.join(CHILD_TIMEOUT)
        if child.is_alive():
            child.kill()
            child.join()
        receiver.close()
    assert child.exitcode == -signal.SIGKILL
    assert reports == [("written", 1), ("written", 2), ("written", 3), ("stalled", stall_at)]

    # The kill landed mid-write: a half-written temporary file is on disk...
    leftovers = hidden_files(file_store.root)
    assert len(leftovers) == 1
    assert os.path.getsize(leftovers[0]) == len(big_object(stall_at)) // 2
    # ...yet the key holds the previous version in full, and listings do not see the temp.
    reopened = FileStore(file_store.root)
    assert reopened.get(key) == big_object(stall_at - 1)
    assert [info.key for info in reopened.list()] == [key]
    assert reopened.list_prefixes("blocks/") == ["big"]
    reopened.put(key, b"after the crash")  # a leftover temp file never gets in the way
    assert reopened.get(key) == b"after the crash"


def test_put_many_makes_every_file_durable_before_any_rename(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_store.put("blocks/existing", b"old")  # the directory exists already
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file"
        events.append((kind, os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append(("replace", os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    items = [(f"blocks/{n:02d}", bytes([n]) * 1000) for n in range(12)] + [("refs/x/1", b"r")]
    file_store.put_many(items)
    monkeypatch.undo()

    kinds = [kind for kind, _ in events]
    first_replace = kinds.index("replace")
    last_replace = len(kinds) - 1 - kinds[::-1].index("replace")
    file_syncs = [path for kind, path in events if kind == "fsync-file"]
    assert len(file_syncs) == len(items)
    assert "fsync-file" not in kinds[first_replace:]  # every byte durable before any rename
    replaced = [path for kind, path in events if kind == "replace"]
    assert replaced == [os.path.join(file_store.root, *key.split("/")) for key, _ in items]
    dirs_synced_after = {path for kind, path in events[last_replace:] if kind == "fsync-dir"}
    assert dirs_synced_after == {
        os.path.join(file_store.root, "blocks"),
        os.path.join(file_store.root, "refs", "x"),
    }
    assert file_store.get_many([key for key, _ in items]) == dict(items)


def test_without_fsync_nothing_is_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "lake", fsync=False)
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    store.put_many([("a/1", b"1"), ("b/2", b"2")])
    assert store.put_if_absent("c/3", b"3")
    assert synced == []
    assert store.get_many(["a/1", "b/2", "c/3"]) == {"a/1": b"1", "b/2": b"2", "c/3": b"3"}


def test_a_non_directory_lake_path_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "not-a-dir"
    path.write_bytes(b"x")
    for location in (str(path), path.as_uri(), path):
        with pytest.raises(UsageError, match=r"not-a-dir.*not a directory"):
            open_store(location)
    assert path.read_bytes() == b"x"


def test_an_object_cannot_also_be_a_directory(file_store: FileStore) -> None:
    file_store.put("a", b"object")
    with pytest.raises(UsageError, match=r"'a'.*cannot hold both"):
        file_store.put("a/b", b"x")
    file_store.put("d/e", b"inside")
    with pytest.raises(UsageError, match=r"'d'.*cannot hold both"):
        file_store.put("d", b"x")
    with pytest.raises(UsageError, match=r"'d'.*cannot hold both"):
        file_store.put_if_absent("d", b"x")
    assert file_store.get("a") == b"object"
    assert file_store.get("d/e") == b"inside"
    assert hidden_files(file_store.root) == []


def test_a_failed_put_many_writes_nothing_and_leaves_no_temp_files(
    file_store: FileStore,
) -> None:
    file_store.put("blocked", b"an object, not a directory")
    with pytest.raises(UsageError, match="'blocked'"):
        file_store.put_many([("ok/1", b"1"), ("blocked/2", b"2"), ("ok/3", b"3")])
    assert [info.key for info in file_store.list()] == ["blocked"]
    assert hidden_files(file_store.root) == []


def test_listings_skip_temporary_and_hidden_files(file_store: FileStore) -> None:
    file_store.put("blocks/a", b"1")
    root = Path(file_store.root)
    (root / ".tmp-123").write_bytes(b"partial")
    (root / "blocks" / ".tmp-456").write_bytes(b"partial")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x").write_bytes(b"x")
    assert [info.key for info in file_store.list()] == ["blocks/a"]
    assert file_store.list_prefixes() == ["blocks"]
    assert file_store.list_prefixes("blocks/") == ["a"]


def test_a_directory_is_not_an_object(file_store: FileStore) -> None:
    file_store.put("dir/obj", b"x")
    assert not file_store.exists("dir")
    with pytest.raises(KeyError):
        file_store.touch("dir")


def test_map_bulk_hands_a_local_pool_one_run_per_worker(tmp_path: Path) -> None:
    """A stat or an unlink on a local disk costs less than handing it to a thread: a
    collection's re-check of 1,000 blocks must not be 1,000 tasks (doc/benchmarks.md, "scale")."""
    store = FileStore(str(tmp_path / "lake"), bulk_workers=4)
    try:
        store.map_bulk(str, ["warm", "up"])  # starts the pool
        pool = store._pool
        assert pool is not None
        tasks: list[int] = []
        real_submit = pool.submit

        def counting_submit(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            tasks.append(1)
            return real_submit(fn, *args, **kwargs)

        pool.submit = counting_submit  # type: ignore[method-assign]
        assert store.map_bulk(lambda n: -n, list(range(1000))) == [-n for n in range(1000)]
        assert len(tasks) == 4
        tasks.clear()
        assert store.map_bulk(lambda n: -n, [1, 2, 3]) == [-1, -2, -3]
        assert len(tasks) == 3  # no more items than workers: one task each, as before
    finally:
        store.close()
