"""Objects a collector killed in a conditional delete left moved aside are put back.

A file lake's collector moves each file it means to delete aside first and reads
its timestamp there; a refreshed one is linked back. A collector paused past its
lock (SIGSTOP) while a writer relied on a block, then killed (SIGKILL) between
moving that block aside and linking it back, used to leave the block's bytes in a
``.tmp-<hex>`` file nothing would put back: the acknowledged version named a
missing block (``merkle.verify`` not ok, ``MissingBlockError``), and the next
collection deleted the file as a stale temporary. The file moved aside now says
which object it is (``.tmp-aside/.tmp-<hex>-aside-<name>``): a read that misses
the object puts it back, and so does a later collection's sweep.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import merkle
from merkle.blocks import BlockStore
from merkle.errors import NotFoundError
from merkle.refs import LeaseManager
from merkle.refs.timing import DEFAULT_SKEW_MARGIN
from merkle.storage import filegc
from merkle.storage.file import FileStore
from merkle.transfer import export_car, import_car
from tests.refs.helpers import FakeClock

SPAWN = multiprocessing.get_context("spawn")
CHILD_TIMEOUT = 120  # seconds: a bound on a hung child, not a performance threshold
LOCK_TTL = 30.0
OLD = time.time() - 3600
ROWS = [{"id": i, "v": f"row-{i}"} for i in range(50)]
_LISTDIR = os.listdir  # the real one, for the tests' own looks (some tests count calls)


class Killed(BaseException):
    """Stands for a SIGKILL at a chosen system call (nothing after it runs)."""


def _aside_dir(root: Path) -> Path:
    return root / "blocks" / filegc.ASIDE_DIR


def _asides(root: Path) -> list[str]:
    holder = _aside_dir(root)
    return sorted(_LISTDIR(holder)) if holder.is_dir() else []


def _hidden_files(root: Path) -> list[str]:
    return [n for _, _, names in os.walk(root) for n in names if n.startswith(".tmp-")]


def _kill_before_putting_back(store: FileStore, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A collector that moves ``key`` (refreshed since it listed it) aside and dies just
    before linking it back."""
    store.put(key, b"block bytes")
    store.set_mtime(key, OLD)
    store.touch(key)  # a writer relied on it after the collector listed it

    def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(filegc.os, "link", link)
        with pytest.raises(Killed):
            store.delete_if_older(key, cutoff=OLD + 1)
    assert not os.path.lexists(store._path(key))


# -- the reported case: real processes, a paused and then killed collector --------------


def _collector(uri: str) -> None:
    """GC that stops itself (SIGSTOP) as it moves its first block aside, and kills itself
    (SIGKILL) as it links a block back from aside."""
    state = {"stopped": False}
    lock = threading.Lock()
    real_rename, real_link = os.rename, os.link

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        with lock:  # every rename waits here: none passes the first one's stop
            moving_aside = "/blocks/" in str(src) and ".tmp-" in os.path.basename(str(dst))
            if moving_aside and not state["stopped"]:
                state["stopped"] = True
                os.kill(os.getpid(), signal.SIGSTOP)  # a paused VM
            real_rename(src, dst, *args, **kwargs)

    def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if state["stopped"] and "/blocks/" in str(dst) and ".tmp-" in str(src):
            os.kill(os.getpid(), signal.SIGKILL)  # putting a refreshed block back
        real_link(src, dst, *args, **kwargs)

    os.rename, os.link = rename, link  # type: ignore[assignment]
    conn = merkle.connect(uri)
    merkle.gc(conn, keep_versions=1, grace=timedelta(0), lock_ttl=LOCK_TTL)


def _late(conn: merkle.Connection) -> merkle.Connection:
    """``conn`` with a clock past any lock the collector took (it has expired for it)."""
    late = FakeClock(time.time() + LOCK_TTL + 2 * DEFAULT_SKEW_MARGIN + 60)
    conn.leases = LeaseManager(conn.store, clock=late, sleep=late.sleep)
    return conn


def test_a_block_a_killed_collector_left_aside_is_read_verified_and_kept(
    tmp_path: Path,
) -> None:
    lake, car = tmp_path / "lake", tmp_path / "v1.car"
    with merkle.connect(lake) as conn:
        db = conn.create_db("a").create_table("t", key="id").write("t", ROWS).commit()
        db.drop_table("t").commit()  # v1's blocks are unreachable from the head
        export_car(conn, "a", car, version=1)  # a backup of v1
        for info in conn.store.list("blocks/"):
            conn.store.set_mtime(info.key, OLD)  # older than the collection's cutoff
    child = SPAWN.Process(target=_collector, args=(str(lake),))
    child.start()
    try:
        _, status = os.waitpid(child.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), "the collector ended before its sweep"
        with _late(merkle.connect(lake)) as writer:  # its lock has lapsed for the writer
            acked = import_car(writer, car, "restored")  # finds v1's blocks, refreshes them
        os.kill(child.pid, signal.SIGCONT)
        child.join(CHILD_TIMEOUT)
    finally:
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == -signal.SIGKILL
    assert _hidden_files(lake), "the collector was not killed with a block moved aside"

    with merkle.connect(lake) as reader:
        assert reader.open_db("restored", version=acked.version).to_arrow("t").num_rows == 50
        report = merkle.verify(reader)
        assert report.ok, report.missing
    with _late(merkle.connect(lake)) as collector:
        merkle.gc(collector, keep_versions=1, grace=timedelta(0), lock_ttl=LOCK_TTL)
    with merkle.connect(lake) as reader:
        assert merkle.verify(reader).ok
        assert reader.open_db("restored").to_arrow("t").num_rows == 50
    assert _hidden_files(lake) == []


# -- recovery on read ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "read",
    [
        lambda s, k: s.get(k),
        lambda s, k: s.get_range(k, 0, 5) + s.get_range(k, 5, 100),
        lambda s, k: s.get(k) if s.stat(k).size == 11 else b"",
    ],
    ids=["get", "get_range", "stat"],
)
def test_a_read_that_misses_puts_back_the_copy_moved_aside(
    file_store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: Any
) -> None:
    _kill_before_putting_back(file_store, "blocks/b1", monkeypatch)
    assert read(file_store, "blocks/b1") == b"block bytes"
    assert file_store.exists("blocks/b1")
    assert _asides(tmp_path / "lake") == []


def test_a_block_store_read_puts_back_the_block(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = BlockStore(file_store)
    cid = blocks.put(b"a block")
    file_store.set_mtime(blocks.key(cid), OLD)
    file_store.touch(blocks.key(cid))

    def link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(filegc.os, "link", link)
        with pytest.raises(Killed):
            blocks.delete_many_if_older([(cid, 7)], cutoff=OLD + 1)
    assert blocks.get(cid) == b"a block"


def test_a_miss_with_nothing_aside_is_one_listing_of_a_missing_directory(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_store.put("blocks/other", b"x")
    listed: list[str] = []
    real = os.listdir

    def listdir(path: Any) -> list[str]:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(filegc.os, "listdir", listdir)
    with pytest.raises(NotFoundError):
        file_store.get("blocks/none")
    with pytest.raises(NotFoundError):
        file_store.stat("blocks/none")
    assert listed == [os.path.join(file_store.root, "blocks", filegc.ASIDE_DIR)] * 2


def test_the_write_path_does_not_look_aside(
    file_store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer's existence checks miss for every new block: they stay one ``stat``; a
    block moved aside is written again (that copy stands), not put back."""
    blocks = BlockStore(file_store)
    key = blocks.key(blocks.cid_of(b"block bytes", "raw"))
    _kill_before_putting_back(file_store, key, monkeypatch)
    listed: list[str] = []
    monkeypatch.setattr(filegc.os, "listdir", lambda path: listed.append(path) or [])
    assert not file_store.exists(key)
    assert file_store.stat_or_none(key) is None
    cid = blocks.put(b"block bytes")  # found missing: written again
    assert blocks.key(cid) == key
    assert listed == []
    assert blocks.get(cid) == b"block bytes"
    assert len(_asides(tmp_path / "lake")) == 1  # left for a read or the sweep


# -- recovery in the collection's sweep ---------------------------------------------------


def test_the_sweep_puts_back_a_missing_object_and_drops_a_redundant_copy(
    file_store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _kill_before_putting_back(file_store, "blocks/gone", monkeypatch)
    _kill_before_putting_back(file_store, "blocks/back", monkeypatch)
    file_store.put("blocks/back", b"block bytes")  # written again by a writer meanwhile
    root = tmp_path / "lake"
    holder = _aside_dir(root)
    moved = max(os.lstat(holder / name).st_ctime for name in _asides(root))
    # Not yet aged: a collector may still be deciding about them.
    assert file_store.remove_stale_temporaries(moved - 1) == (0, 0)
    assert len(_asides(root)) == 2
    assert file_store.remove_stale_temporaries(moved + 1) == (1, 11)
    assert file_store.get("blocks/gone") == b"block bytes"
    assert file_store.get("blocks/back") == b"block bytes"
    assert _hidden_files(root) == []


def test_older_code_and_the_write_temporaries_sweep_never_take_an_aside_file() -> None:
    name = f"{filegc.TMP_PREFIX}{'a' * 32}-aside-bafyblock"
    assert filegc.TMP_NAME.fullmatch(name) is None  # the sweep of writes in flight
    match = filegc.ASIDE_NAME.fullmatch(name)
    assert match is not None
    assert match.group(1) == "bafyblock"
    assert filegc.ASIDE_DIR.startswith(".")  # older sweeps skip hidden directories


# -- the conditional delete itself --------------------------------------------------------


def test_an_old_object_is_removed_and_a_refreshed_one_put_back(
    file_store: FileStore, tmp_path: Path
) -> None:
    for key in ("blocks/old", "blocks/new"):
        file_store.put(key, b"x")
        file_store.set_mtime(key, OLD)
    file_store.touch("blocks/new")
    assert file_store.delete_if_older("blocks/old", cutoff=OLD + 1)
    assert not file_store.delete_if_older("blocks/new", cutoff=OLD + 1)
    with pytest.raises(NotFoundError):
        file_store.get("blocks/old")
    assert file_store.get("blocks/new") == b"x"
    assert _hidden_files(tmp_path / "lake") == []


@pytest.mark.parametrize("refreshed", [False, True], ids=["old", "refreshed"])
def test_a_collector_that_finds_its_copy_put_back_leaves_the_object(
    file_store: FileStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refreshed: bool
) -> None:
    """A reader (or a sweep) put the object back while the collector was paused with
    it aside: the collector goes on without an error and without removing it."""
    file_store.put("blocks/b", b"x")
    file_store.set_mtime("blocks/b", OLD)
    if refreshed:
        file_store.touch("blocks/b")
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.path.basename(str(path)).startswith(".tmp-"):
            assert file_store.get("blocks/b") == b"x"  # a reader, meanwhile
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(filegc.os, "stat", stat)
    assert not file_store.delete_if_older("blocks/b", cutoff=OLD + 1)
    monkeypatch.undo()
    assert file_store.get("blocks/b") == b"x"
    assert _hidden_files(tmp_path / "lake") == []
