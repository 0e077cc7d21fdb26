"""The lake's blocks as a past version (by number, time or tag) opened without a reader
lease reads them.

Without ``lease=True`` nothing keeps a version's blocks once newer versions
exist and retention lets the version go: a collection may remove them under
the reader. A block found missing then is that, far more often than damage,
and the error says so and how to read a version safely while collections run.
"""

from __future__ import annotations

from collections.abc import Callable

from merkle.blocks.cid import CID
from merkle.blocks.store import BlockStore, MissingBlockError
from merkle.db.staging import StagedBlocks
from merkle.errors import MerkleError
from merkle.refs import JournalEntry, RefManager

__all__ = ["UnleasedBlocks", "head_staging", "unleased_explainer", "unleased_staging"]


def unleased_explainer(
    db: str, version: int, still_kept: Callable[[], bool]
) -> Callable[[MerkleError], MerkleError]:
    """What a missing block read for version ``version`` of ``db`` (opened without a
    lease) means: the reader-lease advice once retention no longer keeps the version
    (``still_kept()``, asked only then: it is the head, or still in the journal); the
    plain error otherwise, which is damage (``merkle verify``), not a collection."""

    def explain(error: MerkleError) -> MerkleError:
        if not isinstance(error, MissingBlockError):
            return error
        try:
            if still_kept():
                return error  # a kept version's blocks are kept: this is damage
        except MerkleError:
            return error  # the lake cannot say: the plain error is all there is
        return MissingBlockError(
            f"{error}: version {version} of database {db!r} was opened without "
            "a reader lease, and a collection removes the blocks of versions retention no "
            "longer keeps; open it with open_db(..., lease=True) to keep its blocks while "
            "you read it (or tag it to keep it for good)",
            error.cid,
        )

    return explain


class UnleasedBlocks(BlockStore):
    """Reads of ``base`` (its store and node cache shared) for version ``version`` of
    database ``db``: a missing block's error adds the reader-lease advice when
    retention no longer keeps the version (see :func:`unleased_explainer`)."""

    def __init__(
        self, base: BlockStore, db: str, version: int, still_kept: Callable[[], bool]
    ) -> None:
        super().__init__(base.store, hash=base.hash_code, node_cache=base.node_cache)
        self._explain = unleased_explainer(db, version, still_kept)

    def _missing(self, cid: CID) -> MerkleError:
        return self._explain(super()._missing(cid))


def _kept(refs: RefManager, db: str, version: int) -> Callable[[], bool]:
    """Whether the journal still keeps ``version`` of ``db``: the head, or an entry
    retention has not trimmed (a collection keeps the blocks of both)."""

    def kept() -> bool:
        head = refs.head(db)
        if head is None:
            return False
        if head.version == version:
            return True
        oldest = refs.oldest_version(db)
        return oldest is not None and oldest <= version < head.version

    return kept


def unleased_staging(blocks: BlockStore, refs: RefManager, entry: JournalEntry) -> StagedBlocks:
    """The staging area of a past version (by number, time or tag) read without a lease."""
    kept = _kept(refs, entry.db, entry.version)
    return StagedBlocks(UnleasedBlocks(blocks, entry.db, entry.version, kept))


def head_staging(blocks: BlockStore, refs: RefManager, entry: JournalEntry) -> StagedBlocks:
    """The staging area of a head opened without a lease: it reads ``blocks`` itself (as
    hooks and wrappers of the connection's blocks expect), and a block missing once
    newer versions exist says why, as a past version's does."""
    explain = unleased_explainer(entry.db, entry.version, _kept(refs, entry.db, entry.version))
    return StagedBlocks(blocks, explain=explain)
