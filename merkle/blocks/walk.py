"""Breadth-first walks over everything a set of roots reaches by tag-42 links.

Garbage collection marks with it and a clone by root CID checks with it that
every block is still stored. Only DAG-CBOR nodes are fetched, a level's nodes
concurrently; raw blocks are leaves and never read, so a walk costs the
number of nodes, not the bytes of data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from merkle.blocks.cid import CID, DAG_CBOR
from merkle.blocks.codec import decode_node, iter_links
from merkle.blocks.store import BlockStore, MissingBlockError

__all__ = ["missing_below", "walk_levels"]

_BATCH = 256  # nodes fetched at once


def walk_levels(
    blocks: BlockStore, roots: Iterable[CID], seen: set[bytes], *, use_cache: bool = True
) -> Iterator[list[CID]]:
    """Yield, level by level, the CIDs first reached from ``roots`` (the roots first).

    ``seen`` holds the bytes of the CIDs already visited and grows as the walk
    goes: a CID in it is neither yielded nor descended into, so walking many
    versions that share most blocks costs the blocks that differ. A missing
    or corrupt node raises what :meth:`BlockStore.get_many` raises.
    ``use_cache=False`` reads every node from the store (to prove it is stored).
    """
    level: list[CID] = []
    for root in roots:
        if root.bytes not in seen:
            seen.add(root.bytes)
            level.append(root)
    while level:
        yield level
        nodes = [cid for cid in level if cid.codec == DAG_CBOR]
        level = []
        for i in range(0, len(nodes), _BATCH):
            for link in _links(blocks, nodes[i : i + _BATCH], use_cache):
                if link.bytes not in seen:
                    seen.add(link.bytes)
                    level.append(link)


def _links(blocks: BlockStore, nodes: Sequence[CID], use_cache: bool) -> list[CID]:
    """The links of ``nodes``, in order; uncached nodes are fetched together."""
    cache = blocks.node_cache
    decoded = {cid: cache.get(cid.bytes) if use_cache else None for cid in nodes}
    missing = [cid for cid, node in decoded.items() if node is None]
    if missing:
        for cid, data in blocks.get_many(missing).items():
            decoded[cid] = decode_node(data)
    return [link for node in decoded.values() for link in iter_links(node)]


def missing_below(blocks: BlockStore, roots: Iterable[CID]) -> CID | None:
    """The first block that ``roots`` reach and the store lacks, or None if all are stored.

    Nodes are read from the store (not the cache) and verified; raw leaves
    are only checked for presence. Costs the blocks the roots reach.
    """
    try:
        for level in walk_levels(blocks, roots, set(), use_cache=False):
            leaves = [cid for cid in level if cid.codec != DAG_CBOR]
            present = blocks.store.map_bulk(blocks.has, leaves)
            for cid, ok in zip(leaves, present, strict=True):
                if not ok:
                    return cid
    except MissingBlockError as exc:
        return exc.cid
    return None
