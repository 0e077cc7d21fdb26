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
    db: str, version: int, head_version: Callable[[], int | None]
) -> Callable[[MerkleError], MerkleError]:
    """What a missing block read for version ``version`` of ``db`` (opened without a
    lease) means: the reader-lease advice when the version is no longer the head
    (``head_version()``, asked only then); the plain error otherwise."""

    def explain(error: MerkleError) -> MerkleError:
        if not isinstance(error, MissingBlockError):
            return error
        try:
            head = head_version()
        except MerkleError:
            return error  # the lake cannot say: the plain error is all there is
        if head == version:
            return error  # the head's blocks are kept: this is damage (run merkle verify)
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
    database ``db``: a missing block's error adds the reader-lease advice when the
    version is no longer the head (see :func:`unleased_explainer`)."""

    def __init__(
        self, base: BlockStore, db: str, version: int, head_version: Callable[[], int | None]
    ) -> None:
        super().__init__(base.store, hash=base.hash_code, node_cache=base.node_cache)
        self._explain = unleased_explainer(db, version, head_version)

    def _missing(self, cid: CID) -> MerkleError:
        return self._explain(super()._missing(cid))


def _head_of(refs: RefManager, db: str) -> Callable[[], int | None]:
    def head_version() -> int | None:
        head = refs.head(db)
        return None if head is None else head.version

    return head_version


def unleased_staging(blocks: BlockStore, refs: RefManager, entry: JournalEntry) -> StagedBlocks:
    """The staging area of a past version (by number, time or tag) read without a lease."""
    return StagedBlocks(UnleasedBlocks(blocks, entry.db, entry.version, _head_of(refs, entry.db)))


def head_staging(blocks: BlockStore, refs: RefManager, entry: JournalEntry) -> StagedBlocks:
    """The staging area of a head opened without a lease: it reads ``blocks`` itself (as
    hooks and wrappers of the connection's blocks expect), and a block missing once
    newer versions exist says why, as a past version's does."""
    explain = unleased_explainer(entry.db, entry.version, _head_of(refs, entry.db))
    return StagedBlocks(blocks, explain=explain)
