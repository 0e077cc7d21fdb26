"""A commit with blocks it cannot write again, raced by collections.

A bulk write's pages are written while the commit builds its root, under its
writer lease (``StagedBlocks.writing_early``), and their bytes leave memory;
``build_table`` links another version's tablets (foreign blocks). If a
collection goes on without the writer (it stalled past its lease), the
commit cannot write those blocks again. It never has to
(``merkle.db.landing.rewrite_after_race``): a commit that stands was put
before the collection's fence, and the collection marks it. What a later
collection may remove is only a version retention has trimmed meanwhile,
and such a commit still landed: it returns, it does not fail. A block of a
version still kept found missing is damage, never reported as a success.

The interleavings are forced with hooks and events (``Pause``, a collector
whose clock runs ahead of the writer's), never by sleeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from conftest import Lake
from gc_helpers import connect, missing_blocks, settle
from test_gc_fencing import STALLS, Pause, ahead
from test_gc_writer_leases import WAIT, CommitThread

import merkle
from merkle.blocks.cid import CID
from merkle.blocks.store import BLOCK_PREFIX
from merkle.db import landing
from merkle.db.staging import StagedBlocks
from merkle.errors import IntegrityError
from merkle.tablets import leaves

ROWS = [{"k": i, "v": f"row {i}"} for i in range(40)]
BIG = [{"k": i, "v": f"big row {i}", "n": i * i} for i in range(40)]  # pages of its own
OLD = [{"k": i, "v": f"old row {i}"} for i in range(40)]


@dataclass
class Shop:
    """A lake whose database "shop" holds table "t" (ROWS), and once held "old" (OLD)."""

    lake: Lake
    old_tablets: list[str]  # "old"'s tablets: stored, reached by no version kept from now


@pytest.fixture
def shop(lake: Lake) -> Shop:
    with connect(lake) as conn:
        db = conn.create_db("shop").create_table("t", key="k", patch_limit=0).write("t", ROWS)
        db = db.create_table("old", key="k", patch_limit=0).write("old", OLD).commit()
        old = [t["id"] for t in db.list_tablets("old")]
        db.drop_table("old").commit()
    return Shop(lake, old)


class RacedCommit:
    """A thread committing blocks it cannot write again, paused right after its journal
    put (before it asks whether a collection passed it), and again, once it settled a
    race, before it checks what it must write again.

    ``kind`` "early": a new table "big" whose pages are written early; "foreign":
    table "t" rebuilt from the old tablets (``build_table``). ``blocks``: those blocks.
    """

    def __init__(
        self, conn: merkle.Connection, shop: Shop, kind: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(leaves, "_BULK_ROWS", 1)  # every tablet write is a bulk one
        early: list[str] = []
        real_stored = StagedBlocks._stored

        def stored(staging: StagedBlocks, blocks: Sequence[tuple[CID, bytes]]) -> None:
            early.extend(str(cid) for cid, _ in blocks)
            real_stored(staging, blocks)

        monkeypatch.setattr(StagedBlocks, "_stored", stored)
        self.pause = Pause(conn._writer, "passed", monkeypatch)
        self.recheck = Pause(landing, "rewrite_after_race", monkeypatch)
        db = conn.open_db("shop")
        if kind == "early":
            self.table = "big"
            db = db.create_table("big", key="k", patch_limit=0).write("big", BIG)
        else:
            self.table = "t"
            db = db.build_table("t", shop.old_tablets)
        self.commit = CommitThread(db, kind)
        self.commit.thread.start()
        assert self.pause.reached.wait(WAIT), "the writer never put its journal entry"
        self.blocks = set(early) if kind == "early" else set(shop.old_tablets)
        assert self.blocks, "no block it cannot write again"

    def settle(self) -> None:
        """Let the writer settle its raced commit; it stops before re-checking its blocks."""
        self.pause.go.set()
        assert self.recheck.reached.wait(WAIT), "the writer did not settle a raced commit"

    def finish(self) -> merkle.Database:
        self.pause.go.set()
        self.recheck.go.set()
        return self.commit.join()


@pytest.mark.parametrize("kind", ["early", "foreign"])
def test_a_raced_commit_retired_before_it_returns_still_reports_its_commit(
    shop: Shop, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = shop.lake
    with (
        connect(lake) as writer,
        connect(lake) as other,
        ahead(connect(lake), STALLS[0]) as collector,
    ):
        raced = RacedCommit(writer, shop, kind, monkeypatch)
        first = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
        assert len(first.writer_leases_passed) == 1
        assert not set(first.freed) & raced.blocks, "the fence kept them"
        raced.settle()  # its version is kept: it stands, and was raced
        # Before the writer re-checks its blocks: the table is dropped, and retention
        # (one version) trims the raced version, so a second collection sweeps them.
        other.open_db("shop").drop_table(raced.table).commit(message="drop")
        settle(collector)  # the raced blocks are as old as the grace (S3: whole seconds)
        second = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
        assert set(second.freed) & raced.blocks
        landed = raced.finish()  # no error: the commit landed, and was retired since
    assert landed.version == 3
    with connect(lake) as fresh:
        assert fresh.refs.floor("shop") > landed.version
        history = fresh.history("shop")
        assert [e.message for e in history] == ["gc fence", "drop"]
        assert missing_blocks(fresh.store, history[0].root) == []
        assert merkle.verify(fresh).ok


@pytest.mark.parametrize("kind", ["early", "foreign"])
def test_a_raced_commit_missing_a_block_of_a_kept_version_is_an_integrity_error(
    shop: Shop, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect(shop.lake) as writer, ahead(connect(shop.lake), STALLS[0]) as collector:
        raced = RacedCommit(writer, shop, kind, monkeypatch)
        report = merkle.gc(collector, keep_versions=1, grace="0s", writer_wait=0)
        assert len(report.writer_leases_passed) == 1
        # Damage no collection does: a block of the (kept) raced version disappears.
        gone = sorted(raced.blocks)[0]
        writer.store.delete(BLOCK_PREFIX + gone)
        with pytest.raises(IntegrityError, match=gone):
            raced.finish()
    with connect(shop.lake) as fresh:
        entry = fresh.history("shop")[1]
        assert entry.message == kind, "the entry was put: the error says it is damaged"
        assert gone in missing_blocks(fresh.store, entry.root)
