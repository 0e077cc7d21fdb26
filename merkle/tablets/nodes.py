"""The typed nodes of a table: table root, index node, tablet, batch.

Each node is a DAG-CBOR map with ``type`` and ``v``; this module (with
:mod:`merkle.tablets.indexnode`, whose names it re-exports) turns them into
immutable values and back, and is the only place that knows the field names
(doc/format.md "Table nodes" describes them). Keys inside nodes are
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
from merkle.tablets.indexnode import INDEX, ChildRef, IndexNode
from merkle.tablets.nodefields import bytes_field as _bytes
from merkle.tablets.nodefields import count_field as _count
from merkle.tablets.nodefields import list_field as _list
from merkle.tablets.nodefields import map_field as _map
from merkle.tablets.nodefields import text_field as _text
from merkle.tablets.schema import composite_column, decode_schema, encode_schema

__all__ = [
    "BASE",
    "BATCH",
    "IDENTITY_TABLE_VERSION",
    "INDEX",
    "PAGED_TABLET_VERSION",
    "PATCHED_BATCH_VERSION",
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
TABLET = "merkle/tablet"
BATCH = "merkle/batch"

#: The family that holds every key and the fields of no other family.
BASE = "base"

#: Format version of a table root that has a schema (and maybe a composite key):
#: version 1 roots are the tables written before schemas, read as they always were.
#: Written before field identities; read (with or without ``field_ids``), no longer written.
TYPED_TABLE_VERSION = 2

#: Format version of every table root with a schema written now: version 2 whose meaning
#: includes field identities (``field_ids``, ``schema_epoch``). A version 2 writer would
#: drop them, and would drop or rename a field without counting the epoch (then a field
#: added again under the name passes for the old one), so it must refuse these roots.
IDENTITY_TABLE_VERSION = 3

#: Format version of a tablet whose rows are kept in pages (blocks of a few thousand
#: rows each); version 1 tablets hold one segment per family and read as they always did.
PAGED_TABLET_VERSION = 2

#: Format version of a batch that holds patches; a reader that predates patches must
#: refuse it (it would return records without them). Batches without keep version 1.
PATCHED_BATCH_VERSION = 2

#: Records per page unless a table says otherwise (bench/scale.py measured the choice).
DEFAULT_PAGE_SIZE = 16_384


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
            if not isinstance(node, Mapping):
                raise TypeError(f"limits are a {type(node).__name__}, not a map")
            return cls(
                _count(node["tablet_size"], least=1),
                _count(node["branching"], least=2),
                _count(node["patch"]),
                _count(node.get("patch_share", 0)),
                _count(node.get("page_size", DEFAULT_PAGE_SIZE), least=1),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"table limits are malformed ({exc}): {node!r:.200}") from exc


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
            count, size = _count(node["count"]), _count(node["size"])
            first, last = _bytes(node["first_key"]), _bytes(node["last_key"])
            if node["v"] == PAGED_TABLET_VERSION:
                return cls(count, size, first, last, {}, _pages(_map(node["pages"]), count, first))
            segments = _map(node["segments"])
            if BASE not in segments or not all(
                isinstance(k, str) and isinstance(v, CID) for k, v in segments.items()
            ):
                raise TypeError("segments must map family names, 'base' first, to links")
            return cls(count, size, first, last, dict(segments))
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"tablet {where} is malformed: {exc}") from exc


def _pages(layout: Any, count: int, first_key: bytes) -> tuple[PageRef, ...]:
    """The pages of a version 2 tablet node, checked for consistency."""
    firsts = [_bytes(k) for k in _list(layout["first_keys"])]
    counts = [_count(c, least=1) for c in _list(layout["counts"])]
    sizes = [_count(s) for s in _list(layout["sizes"])]
    keys = _list(layout["keys"])
    families = {_text(name): _list(links) for name, links in _map(layout["families"]).items()}
    n = len(firsts)
    if not n or not len(counts) == len(sizes) == len(keys) == n:
        raise ValueError("first_keys, counts, sizes and keys disagree in length")
    if any(len(links) != n for links in families.values()) or BASE not in families:
        raise ValueError("every family (base among them) needs one entry per page")
    if not all(isinstance(cid, CID) for cid in keys):
        raise TypeError("key page links must be CIDs")
    if not all(c is None or isinstance(c, CID) for links in families.values() for c in links):
        raise TypeError("page links must be CIDs or null")
    if firsts[0] != first_key or sum(counts) != count:
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
class BatchNode:
    """The sorted upserts and tombstones of one or more commits, not yet in the tablets.

    ``lower``..``upper`` is the range of versions whose changes it holds.
    ``upserts`` links an Arrow segment of whole records sorted by key;
    ``deletes`` holds encoded keys, sorted. The ``*_in_merged`` bitmaps say, per
    entry, whether the key existed in the merged area when the batch was
    written: the merged area does not change while the batch is pending, so
    counts and ranks can be adjusted without reading tablets.

    ``patches`` (present only when a batch has some) links an Arrow segment of
    field-level changes to existing records, sorted by key, disjoint from the
    upserts and deletes: the key column and one column per patched field;
    ``patched`` maps each such field to a bitmap of the rows that set it
    (see :mod:`merkle.tablets.patches`). A batch with patches is format version
    2, so that a reader that predates patches refuses it instead of returning
    records without them; one without is version 1, byte for byte what earlier
    versions wrote. Version 1 batches with patches (written before this rule)
    read too.
    """

    lower: int
    upper: int
    upserts: CID | None
    upsert_count: int
    upserts_in_merged: bytes
    deletes: tuple[bytes, ...]
    deletes_in_merged: bytes
    size: int
    patches: CID | None = None
    patch_count: int = 0
    patched: tuple[tuple[str, bytes], ...] = ()

    @property
    def count(self) -> int:
        return self.upsert_count + len(self.deletes) + self.patch_count

    def to_node(self) -> dict[str, Any]:
        node = self._base_node()
        if self.patch_count:
            node["v"] = PATCHED_BATCH_VERSION
            node["patches"] = self.patches
            node["patch_count"] = self.patch_count
            node["patched"] = dict(self.patched)
        return node

    def _base_node(self) -> dict[str, Any]:
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
        node = check_node(node, BATCH, where=where, versions=(NODE_VERSION, PATCHED_BATCH_VERSION))
        try:
            upserts = node["upserts"]
            if upserts is not None and not isinstance(upserts, CID):
                raise TypeError("upserts must be a link or null")
            patches = node.get("patches")
            if patches is not None and not isinstance(patches, CID):
                raise TypeError("patches must be a link or absent")
            patched = node.get("patched", {})
            if not isinstance(patched, dict) or not all(isinstance(k, str) for k in patched):
                raise TypeError("patched must map field names to bitmaps")
            batch = cls(
                _count(node["lower"]),
                _count(node["upper"]),
                upserts,
                _count(node["upsert_count"]),
                _bytes(node["upserts_in_merged"]),
                tuple(_bytes(k) for k in _list(node["deletes"])),
                _bytes(node["deletes_in_merged"]),
                _count(node["size"]),
                patches,
                _count(node.get("patch_count", 0)),
                tuple((name, _bytes(bits)) for name, bits in patched.items()),
            )
            if batch.lower > batch.upper:
                raise ValueError(f"versions {batch.lower}..{batch.upper} are out of order")
            bits = len(batch.upserts_in_merged) * 8, len(batch.deletes_in_merged) * 8
            if bits[0] < batch.upsert_count or bits[1] < len(batch.deletes):
                raise ValueError("a membership bitmap is shorter than its entries")
            if (batch.patches is None) != (batch.patch_count == 0) or any(
                len(mask) * 8 < batch.patch_count for _, mask in batch.patched
            ):
                raise ValueError("the patches, their count and their bitmaps disagree")
            if node["v"] == PATCHED_BATCH_VERSION and not batch.patch_count:
                raise ValueError(
                    f"it holds no patches, but only a batch with patches is version "
                    f"{PATCHED_BATCH_VERSION} (one without is version {NODE_VERSION})"
                )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(f"batch {where} is malformed: {exc}") from exc
        if node.get("count") != batch.count:
            raise IntegrityError(
                f"batch {where} has count {node.get('count')!r:.40}, holds {batch.count}"
            )
        return batch


def _field_ids(node: Any) -> dict[str, tuple[str, int]]:
    """The stored field identities: name -> [birth name, epoch]."""
    out: dict[str, tuple[str, int]] = {}
    for name, ident in _map(node).items():
        birth, epoch = _list(ident)
        out[_text(name)] = (_text(birth), _count(epoch))
    return out


def _check_identities(root: TableRoot, node: Mapping[str, Any]) -> None:
    """ValueError unless the stored field identities are canonical and consistent: only
    non-default entries, each naming a field of the schema, born no later than the
    table's epoch, and no identity shared by two fields."""
    if ("field_ids" in node and not root.field_ids) or node.get("schema_epoch", 1) == 0:
        raise ValueError("field_ids or schema_epoch is stored empty (they are left out)")
    names = root.schema.names if root.schema is not None else []
    for name, (birth, epoch) in root.field_ids.items():
        bad = not birth or epoch > root.schema_epoch or (birth, epoch) == (name, 0)
        if name not in names or name in root.key_fields or bad:
            raise ValueError(f"field_ids holds a bad identity {[birth, epoch]!r} for {name!r}")
    ids = [root.field_ids.get(name, (name, 0)) for name in names]
    if len(set(ids)) != len(ids):
        raise ValueError("two fields share one identity in field_ids")


@dataclass(frozen=True, slots=True)
class TableRoot:
    """The root of one table version: settings, the merged area and the pending batches.

    ``key_field`` is the segment key column; ``key_fields`` the user's key
    fields (one, or several for a composite key, stored as a struct column).
    ``typed`` tables (format version 3, or 2 when written before field
    identities) keep a ``schema`` (None until the first write or declaration);
    version 1 tables have none and read as they always did.
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
    #: Field name -> identity (birth name, epoch), for fields whose identity is not
    #: ``(name, 0)``; see :mod:`merkle.tablets.fieldids`.
    field_ids: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    #: How many schema changes took a field name away (drops, renames).
    schema_epoch: int = 0

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
            node["v"] = IDENTITY_TABLE_VERSION
            fields = self.key_fields
            node["key"]["field"] = list(fields) if len(fields) > 1 else fields[0]
            node["schema"] = None if self.schema is None else encode_schema(self.schema)
            if self.free_default:
                node["new_fields"] = "free"
            if self.field_ids:
                node["field_ids"] = {n: [b, e] for n, (b, e) in sorted(self.field_ids.items())}
            if self.schema_epoch:
                node["schema_epoch"] = self.schema_epoch
            try:
                # The reader's own check, before anything is stored: a root it refuses
                # (e.g. two fields with one identity) would make the table unreadable
                # at every version after it, and no commit may point at one.
                _check_identities(self, node)
            except ValueError as exc:
                raise IntegrityError(
                    f"refusing to write a table root that could not be read back: {exc} "
                    f"(fields {self.schema.names if self.schema is not None else []}, "
                    f"identities {dict(self.field_ids)}); nothing was stored. This is a "
                    "merkle-db bug: report it with the operation that led here"
                ) from exc
        return node

    @classmethod
    def from_node(cls, node: Any, where: object = None) -> TableRoot:
        versions = (NODE_VERSION, TYPED_TABLE_VERSION, IDENTITY_TABLE_VERSION)
        node = check_node(node, TABLE, where=where, versions=versions)
        typed = node["v"] != NODE_VERSION
        try:
            key = _map(node["key"])
            key_fields: tuple[str, ...] = ()
            if typed:
                named = key["field"]
                key_fields = (named,) if isinstance(named, str) else tuple(map(_text, _list(named)))
                if not key_fields:
                    raise ValueError("the key names no field")
                key_field = key_fields[0] if len(key_fields) == 1 else composite_column(key_fields)
            else:
                key_field = _text(key["field"])
            stored = node.get("schema") if typed else None
            if stored is not None and not isinstance(stored, bytes):
                raise TypeError("schema must be bytes or null")
            data = node["data"]
            pending = tuple(_list(node["pending"]))
            if data is not None and not isinstance(data, CID):
                raise TypeError("data must be a link or null")
            if not all(isinstance(p, CID) for p in pending):
                raise TypeError("pending entries must be links")
            codec = key["codec"]
            families = _map(node["families"])
            if not all(
                isinstance(name, str) and all(isinstance(f, str) for f in _list(fields))
                for name, fields in families.items()
            ):
                raise TypeError("families must map names to lists of field names")
            root = cls(
                key_field,
                None if codec is None else _text(codec),
                {name: tuple(fields) for name, fields in families.items()},
                Limits.from_node(node["limits"]),
                data,
                pending,
                _count(node["count"]),
                _count(node["size"]),
                node.get("meta"),
                _text(node.get("uid", "")),
                key_fields,
                typed,
                None if stored is None else decode_schema(stored, where),
                node.get("new_fields", "typed") == "free",
                _field_ids(node.get("field_ids", {})) if typed else {},
                _count(node.get("schema_epoch", 0)) if typed else 0,
            )
            if typed:
                _check_identities(root, node)
            return root
        except (KeyError, TypeError, ValueError, IntegrityError) as exc:
            raise IntegrityError(f"table root {where} is malformed: {exc}") from exc
