"""The root CID a clone is made from (``create_db(name, root="bafy...")``), checked.

A CID names any block of the lake: a table or tablet node, a raw data block,
or one not stored at all. Only a database root can be cloned, and a CID of
another block is the caller's mistake, not damage to the lake: it is a
:class:`UsageError` saying so, found from the CID's codec before any block
is read (a raw block decoded as DAG-CBOR read as a malformed block, which
``merkle verify`` would not find) and from the node's type after. A block
that claims to be a database root and cannot be read as one stays an
:class:`IntegrityError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from merkle.blocks.cid import CID, DAG_CBOR, RAW
from merkle.db.dbroot import DB_ROOT, DbRoot
from merkle.errors import UsageError

if TYPE_CHECKING:
    from merkle.blocks.store import BlockStore

__all__ = ["clone_root"]

_ADVICE = "clone from a database version's root (Database.root, or a root `merkle db log` shows)"


def clone_root(blocks: BlockStore, root: str) -> CID:
    """The CID of ``root``, a database root's CID string; UsageError for a malformed
    CID or one of another kind of block, NotFoundError for a block not stored."""
    cid = CID.parse(root)
    if cid.codec != DAG_CBOR:
        what = "a raw data block" if cid.codec == RAW else f"a block of codec 0x{cid.codec:x}"
        raise UsageError(f"root {cid} is {what}, not a database root: {_ADVICE}")
    node = blocks.get_node(cid)
    kind = node.get("type") if isinstance(node, dict) else None
    if kind != DB_ROOT:
        what = f"a {kind} node" if isinstance(kind, str) else "a block with no merkle node type"
        raise UsageError(f"root {cid} is {what}, not a database root: {_ADVICE}")
    DbRoot.from_node(node, cid)  # a newer format, or a damaged root: IntegrityError
    return cid
