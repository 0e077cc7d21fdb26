"""The typed nodes of a table: table root, index node, tablet, batch.

Each node is a DAG-CBOR map with ``type`` and ``v``; this module turns them
into frozen dataclasses and back, and is the only place that knows the field
names (doc/format.md "Table nodes" describes them). Keys inside nodes are
always *encoded* key bytes (see :mod:`merkle.tablets.keys`), so sorting and
comparing them never needs the key codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from merkle.blocks.cid import CID
from merkle.blocks.codec import NODE_VERSION, check_node
from merkle.errors import IntegrityError
from merkle.tablets.schema import composite_column, decode_schema, encode_schema

__all__ = [
    "BASE",
    "BATCH",
    "INDEX",
    "PAGED_TABLET_VERSION",
    "TABLE",
    "TABLET",
    "TYPED_TABLE_VERSION",
    "BatchNode",
    "ChildRef",
    "IndexNode",
    "Limits",
    "PageRef",
    "TableRoot",
    "TabletNode",
]

TABLE = "merkle/table"
INDEX = "merkle/index"
TABLET = "merkle/tablet"
BATCH = "merkle/batch"

#: The family that holds every key and the fields of no other family.
BASE = "base"

#: Format version of a table root that has a schema (and maybe a composite key):
#: version 1 roots are the tables written before schemas, read as they always were.
TYPED_TABLE_VERSION = 2

#: Format version of a tablet whose rows are kept in pages (blocks of a few thousand
#: rows each); version 1 tablets hold one segment per family and read as they always did.
PAGED_TABLET_VERSION = 2

#: Records per page unless a table says otherwise (bench/scale.py measured the choice).
DEFAULT_PAGE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class Limits:
    """Shape limits of a table's tree.

    ``tablet_size`` is the most records a tablet holds before it splits;
    ``branching`` the most children of an index node. Pending batches are
    flushed into tablets once they hold more than ``patch`` records *and* more
    than ``patch_share`` percent of the merged area's records: a flush
    rewrites every tablet that random changes touch (often all of them), so
    it is worth it only once the pending changes are a good share of the
    table.
    """

    tablet_size: int = 100_000
    branching: int = 256
    patch: int = 20_000
    patch_share: int = 50
    #: Records per page of a tablet (bench/scale.py measures the choice): a point
    #: read fetches one page per family, an existence check one key page.
    page_size: int = DEFAULT_PAGE_SIZE

    @property
    def min_tablet(self) -> int:
        """A tablet below this many records is merged with a neighbour."""
        return max(1, self.tablet_size // 4)

    @property
    def page_rows(self) -> int:
        """The most records a page holds: ``page_size``, or an eighth of a tablet if smaller.

        Pages of at most an eighth of a tablet let a tablet that grew past its
        limit be cut at page boundaries into tablets of a legal size, reusing
        every page it already had (see doc/format.md, "Tablet").
        """
        return max(1, min(self.page_size, self.tablet_size // 8))

    @property
    def min_page(self) -> int:
        """A rewritten page below this many records is merged with a neighbouring page."""
        return max(1, self.page_rows // 4)

    @property
    def min_children(self) -> int:
        """A non-root index node below this many children is merged with a neighbour."""
        return max(2, self.branching // 2)

    def to_node(self) -> dict[str, int]:
        return {
            "tablet_size": self.tablet_size,
            "branching": self.branching,
            "patch": self.patch,
            "patch_share": self.patch_share,
            "page_size": self.page_size,
        }

    def flush_above(self, merged_count: int) -> int:
        """Pending records beyond this many are flushed into tablets."""
        return max(self.patch, merged_count * self.patch_share // 100)

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> Limits:
        try:
            return cls(
                int(node["tablet_size"]),
                int(node["branching"]),
                int(node["patch"]),
                int(node.get("patch_share", 0)),
                int(node.get("page_size", DEFAULT_PAGE_SIZE)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"table limits are malformed: {node!r}") from exc


@dataclass(frozen=True, slots=True)
class ChildRef:
    """What a parent knows of one subtree: its link, height, size and key range."""

    cid: CID
    height: int  # 0 for a tablet
    count: int
    size: int
    first_key: bytes
    last_key: bytes


@dataclass(frozen=True, slots=True)
class PageRef:
    """One page of a tablet: its first key, rows, bytes and blocks.

    ``keys`` is the block of the page's key column; ``families`` maps each
    family of the tablet to the block of its fields in this page (None when
    the page holds no value of that family). Rows are aligned by position
    across a page's blocks.
    """

    first_key: bytes
    count: int
    size: int
    keys: CID
    families: dict[str, CID | None]

    def blocks(self) -> list[CID]:
        """Every block of the page (the key block first)."""
        return [self.keys, *(cid for cid in self.families.values() if cid is not None)]


@dataclass(frozen=True, slots=True)
class TabletNode:
    """A leaf: a contiguous key range, its rows in pages (version 2) or whole segments (1).

    A version 1 tablet (written before pages) has ``segments``, one Arrow
    segment per family holding every row (the base one with the key column),
    and no ``pages``; a version 2 tablet has ``pages`` and no ``segments``.
    """

    count: int
    size: int
    first_key: bytes
    last_key: bytes
    segments: dict[str, CID] = field(default_factory=dict)
    pages: tuple[PageRef, ...] = ()

    @property
    def paged(self) -> bool:
        return bool(self.pages)

    def families(self) -> list[str]:
        """The families that hold a block somewhere in this tablet, ``base`` first."""
        if not self.pages:
            return [BASE, *sorted(name for name in self.segments if name != BASE)]
        names = {name for page in self.pages for name in page.families}
        return [BASE, *sorted(names - {BASE})]

    def blocks(self) -> list[CID]:
        """Every data block of the tablet."""
        if not self.pages:
            return list(self.segments.values())
        return [cid for page in self.pages for cid in page.blocks()]

    def to_node(self) -> dict[str, Any]:
        node: dict[str, Any] = {
            "type": TABLET,
            "v": NODE_VERSION,
            "count": self.count,
            "size": self.size,
            "first_key": self.first_key,
            "last_key": self.last_key,
        }
        if not self.pages:
            node["segments"] = dict(self.segments)
            return node
        names = self.families()
        node["v"] = PAGED_TABLET_VERSION
        node["pages"] = {
            "first_keys": [page.first_key for page in self.pages],
            "counts": [page.count for page in self.pages],
            "sizes": [page.size for page in self.pages],
            "keys": [page.keys for page in self.pages],
            "families": {name: [page.families.get(name) for page in self.pages] for name in names},
        }
        return node

    @classmethod
    def from_node(cls, node: Any, where: object = None) -> TabletNode:
        node = check_node(node, TABLET, where=where, versions=(NODE_VERSION, PAGED_TABLET_VERSION))
        try:
            count, size = int(node["count"]), int(node["size"])
            first, last = bytes(node["first_key"]), bytes(node["last_key"])
            if node["v"] == PAGED_TABLET_VERSION:
                return cls(count, size, first, last, {}, _pages(node["pages"], count, first))
            segments = node["segments"]
            if not all(isinstance(v, CID) for v in segments.values()):
                raise TypeError("segment links must be CIDs")
            return cls(count, size, first, last, dict(segments))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IntegrityError(f"tablet {where} is malformed: {exc}") from exc


def _pages(layout: Any, count: int, first_key: bytes) -> tuple[PageRef, ...]:
    """The pages of a version 2 tablet node, checked for consistency."""
    firsts = [bytes(k) for k in layout["first_keys"]]
    counts = [int(c) for c in layout["counts"]]
    sizes = [int(s) for s in layout["sizes"]]
    keys = list(layout["keys"])
    families = {str(name): list(links) for name, links in layout["families"].items()}
    n = len(firsts)
    if not n or not len(counts) == len(sizes) == len(keys) == n:
        raise ValueError("first_keys, counts, sizes and keys disagree in length")
    if any(len(links) != n for links in families.values()) or BASE not in families:
        raise ValueError("every family (base among them) needs one entry per page")
    if not all(isinstance(cid, CID) for cid in keys):
        raise TypeError("key page links must be CIDs")
    if not all(c is None or isinstance(c, CID) for links in families.values() for c in links):
        raise TypeError("page links must be CIDs or null")
    if firsts[0] != first_key or sum(counts) != count or min(counts) < 1:
        raise ValueError("pages do not add up to the tablet's first key and count")
    return tuple(
        PageRef(
            firsts[i],
            counts[i],
            sizes[i],
            keys[i],
            {name: links[i] for name, links in families.items()},
        )
        for i in range(n)
    )


@dataclass(frozen=True, slots=True)
class IndexNode:
    """An interior node: children in key order with their counts, sizes and key ranges.

    ``keys[i]`` is the separator between child ``i`` and child ``i + 1``: the
    first key of child ``i + 1``. A key ``k`` belongs to the child
    ``bisect_right(keys, k)``.
    """

    height: int
    children: tuple[ChildRef, ...]

    @property
    def keys(self) -> list[bytes]:
        return [child.first_key for child in self.children[1:]]

    @property
    def count(self) -> int:
        return sum(child.count for child in self.children)

    @property
    def size(self) -> int:
        return sum(child.size for child in self.children)

    def to_node(self) -> dict[str, Any]:
        children = self.children
        return {
            "type": INDEX,
            "v": NODE_VERSION,
            "height": self.height,
            "keys": self.keys,
            "children": [child.cid for child in children],
            "counts": [child.count for child in children],
            "sizes": [child.size for child in children],
            "last_keys": [child.last_key for child in children],
            "first_key": children[0].first_key,
            "last_key": children[-1].last_key,
        }

    @classmethod
    def from_node(cls, node: Any, where: object = None) -> IndexNode:
        node = check_node(node, INDEX, where=where)
        try:
            height = int(node["height"])
            links = node["children"]
            counts, sizes = node["counts"], node["sizes"]
            lasts, keys = node["last_keys"], node["keys"]
            n = len(links)
            if not n or not len(counts) == len(sizes) == len(lasts) == n or len(keys) != n - 1:
                raise ValueError("children, counts, sizes, last_keys and keys disagree in length")
            firsts = [bytes(node["first_key"]), *map(bytes, keys)]
            children = tuple(
                ChildRef(
                    links[i], height - 1, int(counts[i]), int(sizes[i]), firsts[i], bytes(lasts[i])
                )
                for i in range(n)
            )
            if not all(isinstance(c.cid, CID) for c in children):
                raise TypeError("child links must be CIDs")
            return cls(height, children)
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"index node {where} is malformed: {exc}") from exc


@dataclass(frozen=True, slots=True)
class BatchNode:
    """The sorted upserts and tombstones of one or more commits, not yet in the tablets.

    ``lower``..``upper`` is the range of versions whose changes it holds.
    ``upserts`` links an Arrow segment of whole records sorted by key;
    ``deletes`` holds encoded keys, sorted. The ``*_in_merged`` bitmaps say, per
    entry, whether the key existed in the merged area when the batch was
    written: the merged area does not change while the batch is pending, so
    counts and ranks can be adjusted without reading tablets.
    """

    lower: int
    upper: int
    upserts: CID | None
    upsert_count: int
    upserts_in_merged: bytes
    deletes: tuple[bytes, ...]
    deletes_in_merged: bytes
    size: int

    @property
    def count(self) -> int:
        return self.upsert_count + len(self.deletes)

    def to_node(self) -> dict[str, Any]:
        return {
            "type": BATCH,
            "v": NODE_VERSION,
            "lower": self.lower,
            "upper": self.upper,
            "count": self.count,
            "size": self.size,
            "upserts": self.upserts,
            "upsert_count": self.upsert_count,
            "upserts_in_merged": self.upserts_in_merged,
            "deletes": list(self.deletes),
            "deletes_in_merged": self.deletes_in_merged,
        }

    @classmethod
    def from_node(cls, node: Any, where: object = None) -> BatchNode:
        node = check_node(node, BATCH, where=where)
        try:
            upserts = node["upserts"]
            if upserts is not None and not isinstance(upserts, CID):
                raise TypeError("upserts must be a link or null")
            batch = cls(
                int(node["lower"]),
                int(node["upper"]),
                upserts,
                int(node["upsert_count"]),
                bytes(node["upserts_in_merged"]),
                tuple(bytes(k) for k in node["deletes"]),
                bytes(node["deletes_in_merged"]),
                int(node["size"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"batch {where} is malformed: {exc}") from exc
        if int(node.get("count", -1)) != batch.count:
            raise IntegrityError(
                f"batch {where} has count {node.get('count')}, holds {batch.count}"
            )
        return batch


@dataclass(frozen=True, slots=True)
class TableRoot:
    """The root of one table version: settings, the merged area and the pending batches.

    ``key_field`` is the segment key column; ``key_fields`` the user's key
    fields (one, or several for a composite key, stored as a struct column).
    ``typed`` tables (format version 2) keep a ``schema`` (None until the
    first write or declaration); version 1 tables have none and read as they
    always did.
    """

    key_field: str
    key_codec: str | None  # None until the first write picks one
    families: dict[str, tuple[str, ...]]
    limits: Limits
    data: CID | None
    pending: tuple[CID, ...]
    count: int
    size: int
    meta: Any = field(default=None)
    #: Identity of the table across versions: a drop and re-create gives a new one.
    uid: str = ""
    key_fields: tuple[str, ...] = ()
    typed: bool = False
    schema: pa.Schema | None = None
    #: Fields first written after this table chose so are schema-free (the record model).
    free_default: bool = False

    def __post_init__(self) -> None:
        if not self.key_fields:
            object.__setattr__(self, "key_fields", (self.key_field,))

    def family_of(self) -> dict[str, str]:
        """Field name -> family name, for every field that belongs to a family."""
        return {f: fam for fam, fields in self.families.items() for f in fields}

    def to_node(self) -> dict[str, Any]:
        node: dict[str, Any] = {
            "type": TABLE,
            "v": NODE_VERSION,
            "key": {"field": self.key_field, "codec": self.key_codec},
            "families": {name: sorted(fields) for name, fields in self.families.items()},
            "limits": self.limits.to_node(),
            "data": self.data,
            "pending": list(self.pending),
            "count": self.count,
            "size": self.size,
            "meta": self.meta,
            "uid": self.uid,
        }
        if self.typed:
            node["v"] = TYPED_TABLE_VERSION
            fields = self.key_fields
            node["key"]["field"] = list(fields) if len(fields) > 1 else fields[0]
            node["schema"] = None if self.schema is None else encode_schema(self.schema)
            if self.free_default:
                node["new_fields"] = "free"
        return node

    @classmethod
    def from_node(cls, node: Any, where: object = None) -> TableRoot:
        node = check_node(node, TABLE, where=where, versions=(NODE_VERSION, TYPED_TABLE_VERSION))
        typed = node["v"] == TYPED_TABLE_VERSION
        try:
            key_fields: tuple[str, ...] = ()
            if typed:
                named = node["key"]["field"]
                key_fields = (str(named),) if isinstance(named, str) else tuple(map(str, named))
                if not key_fields:
                    raise ValueError("the key names no field")
                key_field = key_fields[0] if len(key_fields) == 1 else composite_column(key_fields)
            else:
                key_field = str(node["key"]["field"])
            stored = node.get("schema") if typed else None
            if stored is not None and not isinstance(stored, bytes):
                raise TypeError("schema must be bytes or null")
            data = node["data"]
            pending = tuple(node["pending"])
            if data is not None and not isinstance(data, CID):
                raise TypeError("data must be a link or null")
            if not all(isinstance(p, CID) for p in pending):
                raise TypeError("pending entries must be links")
            return cls(
                key_field,
                None if node["key"]["codec"] is None else str(node["key"]["codec"]),
                {str(k): tuple(v) for k, v in node["families"].items()},
                Limits.from_node(node["limits"]),
                data,
                pending,
                int(node["count"]),
                int(node["size"]),
                node.get("meta"),
                str(node.get("uid", "")),
                key_fields,
                typed,
                None if stored is None else decode_schema(stored, where),
                node.get("new_fields", "typed") == "free",
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"table root {where} is malformed: {exc}") from exc
