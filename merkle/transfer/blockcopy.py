"""Copy the blocks of a DAG to another lake, writing only what the destination lacks.

The walk goes level by level from the root on both lakes at once:

* The destination's *trusted* roots (versions committed there, read under
  the caller's writer lease) are walked alongside, opening only their nodes
  that the source does not share. A source block seen there is skipped with
  its whole subtree: a committed version's blocks are all present, and the
  writer lease keeps a collection from deleting them before the commit.
* Any other source block is looked up on the destination (refreshing its
  timestamp, so a collection spares it while the lease lives). A stored
  block there is *not* trusted to have its subtree: an earlier copy may have
  died half-way and a collection may have deleted its children since, so
  the walk still descends into it, but does not copy it again.
* Missing raw blocks (leaves) are copied as they are found; missing nodes
  are held (they are small) and written at the end, deepest level first, so
  a parent is never stored before its children.

Every block read from the source is verified against its CID.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from merkle.blocks.cid import CID, DAG_CBOR
from merkle.blocks.codec import decode_node, iter_links
from merkle.blocks.store import BlockStore

__all__ = ["CopyStats", "copy_dag"]

_BATCH = 128  # blocks fetched or looked up at once


@dataclass
class CopyStats:
    """What a copy did: blocks and bytes written, blocks found present, nodes read."""

    blocks_copied: int = 0
    bytes_copied: int = 0
    blocks_present: int = 0
    blocks_skipped: int = 0
    source_reads: int = 0
    destination_reads: int = 0

    def __iadd__(self, other: CopyStats) -> CopyStats:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


def _chunks(items: Sequence[CID]) -> Iterable[Sequence[CID]]:
    for i in range(0, len(items), _BATCH):
        yield items[i : i + _BATCH]


def _links(data: bytes) -> list[CID]:
    return list(iter_links(decode_node(data)))


def copy_dag(
    source: BlockStore,
    destination: BlockStore,
    roots: Sequence[CID],
    trusted: Sequence[CID],
    *,
    refresh_before: float | None,
    on_write: Callable[[int], None] | None = None,
) -> CopyStats:
    """Make every block ``roots`` reach present in ``destination`` (see the module doc).

    ``trusted``: roots of versions committed in the destination. Call under
    a writer lease of the destination that started at ``refresh_before``.
    ``on_write(n)`` is called after each write of ``n`` blocks (progress).
    """
    stats = CopyStats()
    src_seen: set[bytes] = set()
    dst_seen: set[bytes] = {cid.bytes for cid in trusted}
    level = [cid for cid in dict.fromkeys(roots)]
    src_seen.update(cid.bytes for cid in level)
    dst_level = [cid for cid in dict.fromkeys(trusted)]
    held: list[list[tuple[CID, bytes]]] = []  # missing nodes, per level

    def write(blocks: list[tuple[CID, bytes]]) -> None:
        if blocks:
            destination.put_hashed(blocks, refresh_before=refresh_before)
            stats.blocks_copied += len(blocks)
            stats.bytes_copied += sum(len(data) for _, data in blocks)
            if on_write is not None:
                on_write(len(blocks))

    while level:
        todo = [cid for cid in level if cid.bytes not in dst_seen]
        stats.blocks_skipped += len(level) - len(todo)
        next_level: list[CID] = []
        missing_nodes: list[tuple[CID, bytes]] = []
        for part in _chunks(todo):
            found = destination.present(part, refresh_before=refresh_before)
            stats.blocks_present += sum(found)
            nodes = [cid for cid in part if cid.codec == DAG_CBOR]
            need = [cid for cid, ok in zip(part, found, strict=True) if not ok or cid in nodes]
            if not need:
                continue
            fetched = source.get_many(need)
            stats.source_reads += len(need)
            raw_missing: list[tuple[CID, bytes]] = []
            for cid, ok in zip(part, found, strict=True):
                if cid.codec == DAG_CBOR:
                    data = fetched[cid]
                    if not ok:
                        missing_nodes.append((cid, data))
                    for link in _links(data):
                        if link.bytes not in src_seen:
                            src_seen.add(link.bytes)
                            next_level.append(link)
                elif not ok:
                    raw_missing.append((cid, fetched[cid]))
            write(raw_missing)
        held.append(missing_nodes)
        # Open the destination's trusted nodes that the source does not share.
        opened = [c for c in dst_level if c.codec == DAG_CBOR and c.bytes not in src_seen]
        dst_level = []
        for part in _chunks(opened):
            for data in destination.get_many(part).values():
                stats.destination_reads += 1
                for link in _links(data):
                    if link.bytes not in dst_seen:
                        dst_seen.add(link.bytes)
                        dst_level.append(link)
        level = next_level
    for missing in reversed(held):
        write(missing)
    return stats
