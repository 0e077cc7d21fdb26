"""Blocks of an uncommitted transaction, held in memory until commit.

Nothing a transaction writes reaches the lake before ``commit()``: its blocks
are staged here (reads see them first, then the lake). At commit, only the
staged blocks reachable from the new root are written, concurrently and
durably, under the writer lease, before the journal entry that names them.
Intermediate blocks (batches merged away within the transaction) never
reach storage.

A new root also links blocks it did not stage. Those of the version the
transaction is based on need no check: the commit's compare-and-set succeeds
only while that version is the head, which every collection keeps (and a
collection that goes on without this writer fences it off first). Blocks
taken from anywhere else (``build_table``'s tablets) are registered as
*foreign*, and the commit proves, under its writer lease, that every block
they reach is stored: a cost proportional to what is linked from outside.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from merkle.blocks.cid import CID, DAG_CBOR, codec_code
from merkle.blocks.codec import decode_node, iter_links
from merkle.blocks.store import BlockStore
from merkle.blocks.walk import missing_below
from merkle.errors import NotFoundError, UsageError
from merkle.storage.base import ObjectInfo

__all__ = ["StagedBlocks"]


class StagedBlocks(BlockStore):
    """A BlockStore whose writes stay in memory until :meth:`flush_reachable`."""

    def __init__(self, base: BlockStore) -> None:
        super().__init__(base.store, hash="sha2-256" if base.hash_code == 0x12 else "blake3")
        self.base = base
        self.node_cache = base.node_cache  # keyed by CID: safe to share
        self._staged: dict[CID, bytes] = {}
        self._foreign: set[CID] = set()
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        raise UsageError("an uncommitted transaction cannot be pickled: commit it first")

    @property
    def staged_bytes(self) -> int:
        """Bytes held in memory."""
        return sum(len(data) for data in self._staged.values())

    def put_many(
        self,
        blocks: Iterable[tuple[bytes, str | int]],
        *,
        refresh_before: float | None = None,
    ) -> list[CID]:
        cids = []
        for data, codec in blocks:
            if not isinstance(data, (bytes, bytearray, memoryview)):
                raise UsageError(f"block data must be bytes, got {type(data).__name__}")
            data = bytes(data)
            cid = CID.of(data, codec_code(codec), self.hash_code)
            with self._lock:
                self._staged.setdefault(cid, data)
            cids.append(cid)
        return cids

    def get(self, cid: CID) -> bytes:
        data = self._staged.get(cid)
        return data if data is not None else self.base.get(cid)

    def get_many(self, cids: Sequence[CID]) -> dict[CID, bytes]:
        found = {cid: self._staged[cid] for cid in cids if cid in self._staged}
        rest = [cid for cid in cids if cid not in found]
        if rest:
            found.update(self.base.get_many(rest))
        return found

    def has(self, cid: CID) -> bool:
        return cid in self._staged or self.base.has(cid)

    def stat(self, cid: CID) -> ObjectInfo:
        data = self._staged.get(cid)
        if data is not None:
            return ObjectInfo(self.key(cid), len(data), time.time())
        return self.base.stat(cid)

    def add_foreign(self, cids: Iterable[CID]) -> None:
        """Register blocks that this transaction links but took from outside its base version."""
        with self._lock:
            self._foreign.update(cids)

    def reachable(self, roots: Sequence[CID]) -> tuple[list[tuple[CID, bytes]], list[CID]]:
        """The staged blocks reachable from ``roots``, and the foreign blocks they link."""
        seen: set[CID] = set()
        found: list[tuple[CID, bytes]] = []
        foreign: list[CID] = []
        stack = list(roots)
        while stack:
            cid = stack.pop()
            if cid in seen:
                continue
            seen.add(cid)
            data = self._staged.get(cid)
            if data is None:
                if cid in self._foreign:
                    foreign.append(cid)
                continue  # already in the lake
            found.append((cid, data))
            if cid.codec == DAG_CBOR:
                node = self.node_cache.get(cid.bytes)
                stack.extend(iter_links(node if node is not None else decode_node(data)))
        return found, foreign

    def flush_reachable(self, roots: Sequence[CID], *, refresh_before: float | None) -> int:
        """Write the staged blocks ``roots`` reach, and prove the foreign ones stored.

        Returns how many staged blocks there were. Blocks already stored are
        not written again (a missing one is: this also repairs a version
        whose blocks a collection raced). Raises :class:`NotFoundError` naming
        a block a foreign link reaches that the lake no longer holds.
        """
        blocks, foreign = self.reachable(roots)
        if blocks:
            # Hashed when staged (put_many above): no second pass over the bytes.
            self.base.put_hashed(blocks, refresh_before=refresh_before)
        if foreign:
            lost = missing_below(self.base, foreign)
            if lost is None:
                # Found, not written: another process's write may be visible before it
                # is durable (a file store before its directory flush).
                self.base.store.make_durable(self.base.key(cid) for cid in foreign)
            if lost is not None:
                raise NotFoundError(
                    f"block {lost} is missing from {self.base.store.uri}: this transaction "
                    "links it (through tablets taken from another version, e.g. by "
                    "build_table) and garbage collection has removed it; nothing was "
                    "committed: build the tablets again from a version that is kept"
                )
        return len(blocks)
