"""Index nodes: the interior nodes of a table's tree, and the references to
children (tablets or index nodes) they hold. Part of the node formats of
:mod:`merkle.tablets.nodes` (which re-exports these names); doc/format.md
"Table nodes" describes the fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cbor2 import CBORTag

from merkle.blocks.cid import CID
from merkle.blocks.codec import NODE_VERSION, check_node, link_of, resolve_links
from merkle.errors import IntegrityError
from merkle.tablets.nodefields import bytes_field as _bytes
from merkle.tablets.nodefields import count_field as _count
from merkle.tablets.nodefields import counts_column as _counts
from merkle.tablets.nodefields import list_field as _list

__all__ = ["INDEX", "ChildRef", "IndexNode"]

INDEX = "merkle/index"


@dataclass(frozen=True, slots=True)
class ChildRef:
    """What a parent knows of one subtree: its link, height, size and key range."""

    cid: CID
    height: int  # 0 for a tablet
    count: int
    size: int
    first_key: bytes
    last_key: bytes


class IndexNode:
    """An interior node: children in key order with their counts, sizes and key ranges.

    ``keys[i]`` is the separator between child ``i`` and child ``i + 1``: the
    first key of child ``i + 1``. A key ``k`` belongs to the child
    ``bisect_right(keys, k)``.

    An immutable value. A node read from a block keeps its fields as the
    columns it was stored in and makes a child's :class:`ChildRef` only when
    asked (:meth:`child`), or all of them for :attr:`children`: a point read
    through a 100-child node uses one child, and making all 100 was 40% of the
    node's decoding (80 of 180 us) on every cold lookup in a 10M-row table.
    """

    __slots__ = ("_children", "_columns", "height", "keys")

    height: int
    #: The separators, made once: every lookup through the node bisects them.
    keys: tuple[bytes, ...]

    def __init__(self, height: int, children: tuple[ChildRef, ...]) -> None:
        self.height = height
        self._children: tuple[ChildRef, ...] | None = tuple(children)
        self._columns: _IndexColumns | None = None
        self.keys = tuple(child.first_key for child in self._children[1:])

    @classmethod
    def _of_columns(cls, height: int, columns: _IndexColumns, keys: tuple[bytes, ...]) -> IndexNode:
        node = object.__new__(cls)
        node.height = height
        node._children = None
        node._columns = columns
        node.keys = keys
        return node

    @property
    def children(self) -> tuple[ChildRef, ...]:
        if self._children is None:
            assert self._columns is not None
            links, counts, sizes, firsts, lasts = self._columns
            cids = list(map(link_of, links))
            below = [self.height - 1] * len(cids)
            self._children = tuple(map(_child_ref, cids, below, counts, sizes, firsts, lasts))
        return self._children

    def child(self, i: int) -> ChildRef:
        """``children[i]``, without making the others."""
        if self._children is not None:
            return self._children[i]
        assert self._columns is not None
        links, counts, sizes, firsts, lasts = self._columns
        cid = link_of(links[i])
        return _child_ref(cid, self.height - 1, counts[i], sizes[i], firsts[i], lasts[i])

    def __len__(self) -> int:
        return len(self._children) if self._children is not None else len(self.keys) + 1

    def counts(self) -> list[int]:
        """The children's record counts (shared with the node: do not change them)."""
        if self._columns is not None:
            return self._columns[1]
        return [child.count for child in self.children]

    @property
    def count(self) -> int:
        return sum(self.counts())

    @property
    def size(self) -> int:
        if self._columns is not None:
            return sum(self._columns[2])
        return sum(child.size for child in self.children)

    @property
    def first_key(self) -> bytes:
        return self._columns[3][0] if self._columns is not None else self.children[0].first_key

    @property
    def last_key(self) -> bytes:
        return self._columns[4][-1] if self._columns is not None else self.children[-1].last_key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexNode):
            return NotImplemented
        return self.height == other.height and self.children == other.children

    def __hash__(self) -> int:
        return hash((self.height, self.children))

    def __repr__(self) -> str:
        return f"IndexNode(height={self.height!r}, children={self.children!r})"

    def to_node(self) -> dict[str, Any]:
        children = self.children
        return {
            "type": INDEX,
            "v": NODE_VERSION,
            "height": self.height,
            "keys": list(self.keys),
            "children": [child.cid for child in children],
            "counts": [child.count for child in children],
            "sizes": [child.size for child in children],
            "last_keys": [child.last_key for child in children],
            "first_key": children[0].first_key,
            "last_key": children[-1].last_key,
        }

    @classmethod
    def from_deferred(cls, node: Any, where: object = None) -> IndexNode:
        """:meth:`from_node` of a node decoded by
        :func:`~merkle.blocks.codec.decode_node_deferred`: its links stay tags until a
        child is asked for (:func:`~merkle.blocks.codec.link_of` checks each then).

        Half of a 100-child node's decoding was making its links, of which a
        point read uses one. Only a node of exactly the index node's fields is
        read so (a tag can then only sit where a link belongs, and any
        elsewhere fails its field's check); any other is resolved whole first,
        so a stray tag is refused as :func:`~merkle.blocks.codec.decode_node`
        refuses it.
        """
        if not isinstance(node, dict) or node.keys() != _FIELDS:
            return cls.from_node(resolve_links(node), where)
        return cls._read(node, where, deferred=True)

    @classmethod
    def from_node(cls, node: Any, where: object = None) -> IndexNode:
        return cls._read(node, where, deferred=False)

    @classmethod
    def _read(cls, node: Any, where: object, *, deferred: bool) -> IndexNode:
        node = check_node(node, INDEX, where=where)
        try:
            height = _count(node["height"], least=1)
            links, counts, sizes = (
                _list(node["children"]),
                _list(node["counts"]),
                _list(node["sizes"]),
            )
            lasts, keys = _list(node["last_keys"]), _list(node["keys"])
            n = len(links)
            if not n or not len(counts) == len(sizes) == len(lasts) == n or len(keys) != n - 1:
                raise ValueError("children, counts, sizes, last_keys and keys disagree in length")
            firsts = [_bytes(node["first_key"]), *keys]
            # Checked a column at a time, and the children's references made only when
            # asked for (see the class docstring).
            _counts(counts)
            _counts(sizes)
            if (keys and set(map(type, keys)) != {bytes}) or set(map(type, lasts)) != {bytes}:
                raise TypeError("keys and last_keys must be byte strings")
            if {type(link) for link in links} != {CBORTag if deferred else CID}:
                raise TypeError("child links must be CIDs")
            return cls._of_columns(height, (links, counts, sizes, firsts, lasts), tuple(keys))
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"index node {where} is malformed: {exc}") from exc


#: An index node's children as stored: links (CIDs, or tags of a deferred node: see
#: :meth:`IndexNode.from_deferred`), counts, sizes, first keys, last keys.
_IndexColumns = tuple[list[Any], list[int], list[int], list[bytes], list[bytes]]
#: The fields of an index node.
_FIELDS = frozenset(
    (
        "type",
        "v",
        "height",
        "keys",
        "children",
        "counts",
        "sizes",
        "last_keys",
        "first_key",
        "last_key",
    )
)


_SET_SLOTS = tuple(getattr(ChildRef, name).__set__ for name in ChildRef.__slots__)
assert ChildRef.__slots__ == ("cid", "height", "count", "size", "first_key", "last_key")


def _child_ref(
    cid: CID, height: int, count: int, size: int, first_key: bytes, last_key: bytes
) -> ChildRef:
    """``ChildRef(...)`` of checked values, without the frozen dataclass's __init__."""
    ref = object.__new__(ChildRef)
    set_cid, set_height, set_count, set_size, set_first, set_last = _SET_SLOTS
    set_cid(ref, cid)
    set_height(ref, height)
    set_count(ref, count)
    set_size(ref, size)
    set_first(ref, first_key)
    set_last(ref, last_key)
    return ref
