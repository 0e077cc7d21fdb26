"""The journal's stored format: entry keys, entries, tombstones of trimmed entries.

Entry ``n`` of database ``db`` lives at ``refs/<db>/<n:020d>`` as a DAG-CBOR
map::

    {type: "merkle/journal-entry", v: 1, db, version: n, root: link | null,
     parent: n-1 | null, time: microseconds since the epoch (UTC),
     author, message, meta: {...}, forked_from: {db, version} | null,
     merged_from: {db, version} | absent,
     prev: bytes (SHA-256 of entry n-1's stored bytes) | absent,
     created: version of this incarnation's create entry | absent}

``merged_from`` names the second parent of a merge commit. It is written
only by merges, so every other entry has the same bytes as before it
existed, and a reader that does not know it reads a merge as an ordinary
commit of its first parent.

``prev`` chains each entry to the exact bytes of its parent, so a writer can
prove that a later entry was built on its own (see ``doc/refs.md``, "Trimming
and stalled writers"). ``created`` names the entry that created this
incarnation of the database (a drop and a create start a new one), so a
transaction can tell that its database was dropped and created again even
after retention trimmed the entries between. Entries written before these
fields existed have neither.

Lakes written by older versions replaced trimmed entries with a tombstone::

    {type: "merkle/journal-trimmed", v: 1, db, version: n, time}

Trimming now deletes them instead (below the retention floor, which is
raised first); readers still accept tombstones where they find them. Every
decode checks the type, format version, database and version number against
the key, so a misplaced or damaged object is an :class:`IntegrityError`
naming its key, never a wrong answer.
"""

from __future__ import annotations

import hashlib
from copy import deepcopy
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from merkle.blocks.cid import CID
from merkle.blocks.codec import NODE_VERSION, decode_node, encode_node, is_newer_format
from merkle.errors import IntegrityError, UsageError
from merkle.refs.errors import JournalEntryDamagedError

__all__ = [
    "CONFIG_KEY",
    "ENTRY_TYPE",
    "TRIMMED_TYPE",
    "JournalEntry",
    "TrimmedEntry",
    "as_utc",
    "decode_slot",
    "encode_entry",
    "encode_trimmed",
    "entry_digest",
    "entry_key",
    "from_micros",
    "head_key",
    "journal_prefix",
    "parse_entry_key",
    "to_micros",
    "trimmed_key",
]

ENTRY_TYPE = "merkle/journal-entry"
TRIMMED_TYPE = "merkle/journal-trimmed"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_VERSION_DIGITS = 20


@dataclass(frozen=True)
class JournalEntry:
    """One committed version of a database, as the journal records it.

    ``root`` is the CID string of the database root block, or None for a
    drop. ``parent`` is the previous entry's version (None for entry 0).
    ``time`` is tz-aware UTC and never earlier than the parent's time.
    ``forked_from`` is ``{"db": name, "version": n}`` for a clone;
    ``merged_from`` is the same for the second parent of a merge commit. ``prev``
    is the digest of the parent entry's stored bytes (None on entry 0 and on
    entries written before digests existed); ``created`` is the version that
    created this incarnation of the database (None on old entries);
    ``digest`` is this entry's own (set when it was decoded from its stored
    bytes).
    """

    db: str
    version: int
    root: str | None
    parent: int | None
    time: datetime
    author: str | None = None
    message: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    forked_from: dict[str, Any] | None = None
    merged_from: dict[str, Any] | None = None
    prev: bytes | None = None
    created: int | None = None
    digest: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def dropped(self) -> bool:
        """Whether this entry drops the database (its root is null)."""
        return self.root is None

    @property
    def fence(self) -> bool:
        """Whether garbage collection wrote this entry to fence off stalled writers."""
        marker = self.meta.get("merkle")
        return isinstance(marker, dict) and "fence" in marker

    def __hash__(self) -> int:
        return hash((self.db, self.version, self.root, self.time))

    def detached(self) -> JournalEntry:
        """This entry with dicts of its own (``meta``, ``forked_from``, ``merged_from``).

        The dataclass is frozen but its dicts are not: an entry a reader caches (the
        head) and also hands out would let an edit of the caller's copy change the
        cache, what ``fence`` says of the head, a merge's lineage, and what a tag of
        the version stores. So the cache keeps its own, and hands out copies.
        """
        return replace(
            self,
            meta=deepcopy(self.meta),
            forked_from=deepcopy(self.forked_from),
            merged_from=deepcopy(self.merged_from),
        )


@dataclass(frozen=True)
class TrimmedEntry:
    """What is left of an entry that retention removed: where it was, and when."""

    db: str
    version: int
    time: datetime


# -- keys ------------------------------------------------------------------------


#: The key of the lake's settings (``merkle.db.lakeconfig``): every lake has it, so its
#: absence tells a lake deleted or moved in use from a journal with entries missing.
CONFIG_KEY = "config"


def journal_prefix(db: str) -> str:
    """The key prefix under which every object of ``db``'s journal lives."""
    return f"refs/{db}/"


def entry_key(db: str, version: int) -> str:
    """The key of entry ``version`` of ``db`` (zero-padded, so keys sort by version)."""
    return f"refs/{db}/{version:0{_VERSION_DIGITS}d}"


def head_key(db: str) -> str:
    """The key of ``db``'s HEAD hint (a copy of a recent entry)."""
    return f"refs/{db}/HEAD"


def trimmed_key(db: str) -> str:
    """The key of ``db``'s retention marker (the oldest version kept)."""
    return f"refs/{db}/TRIMMED"


def parse_entry_key(db: str, key: str) -> int | None:
    """The version an entry key names, or None for HEAD, TRIMMED and strangers."""
    tail = key[len(journal_prefix(db)) :]
    if len(tail) == _VERSION_DIGITS and tail.isascii() and tail.isdigit():
        return int(tail)
    return None


# -- time ------------------------------------------------------------------------


def as_utc(when: datetime) -> datetime:
    """``when`` as tz-aware UTC; a naive datetime is taken to be UTC already."""
    if not isinstance(when, datetime):
        raise UsageError(f"expected a datetime, got {type(when).__name__}")
    if when.tzinfo is None:
        return when.replace(tzinfo=UTC)
    try:
        return when.astimezone(UTC)
    except OverflowError:  # 0001-01-01 at +05:00, 9999-12-31T23:59 at -05:00
        raise UsageError(
            f"{when.isoformat()} is outside the years 1 to 9999 once in UTC: give a time "
            "inside them"
        ) from None


def to_micros(when: datetime) -> int:
    """Microseconds since the epoch: exact, unlike a float of seconds."""
    delta = as_utc(when) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    """The tz-aware UTC datetime of ``micros`` microseconds since the epoch.

    A time outside what a datetime holds (years 1-9999) is an
    :class:`IntegrityError`: no clock wrote it.
    """
    try:
        return _EPOCH + timedelta(microseconds=micros)
    except OverflowError:
        raise IntegrityError(
            f"time {micros} (microseconds since the epoch) is out of range"
        ) from None


# -- encoding --------------------------------------------------------------------


def entry_digest(data: bytes) -> bytes:
    """The digest a child entry records as ``prev``: SHA-256 of the stored bytes."""
    return hashlib.sha256(data).digest()


def encode_entry(entry: JournalEntry) -> bytes:
    """The stored bytes of ``entry`` (deterministic DAG-CBOR)."""
    node: dict[str, Any] = {
        "type": ENTRY_TYPE,
        "v": NODE_VERSION,
        "db": entry.db,
        "version": entry.version,
        "root": None if entry.root is None else CID.parse(entry.root),
        "parent": entry.parent,
        "time": to_micros(entry.time),
        "author": entry.author,
        "message": entry.message,
        "meta": entry.meta,
        "forked_from": entry.forked_from,
    }
    if entry.merged_from is not None:
        node["merged_from"] = entry.merged_from  # absent otherwise: old bytes unchanged
    if entry.prev is not None:
        node["prev"] = entry.prev
    if entry.created is not None:
        node["created"] = entry.created
    return encode_node(node)


def encode_trimmed(entry: JournalEntry | TrimmedEntry) -> bytes:
    """The tombstone that replaces ``entry`` when retention removes it."""
    return encode_node(
        {
            "type": TRIMMED_TYPE,
            "v": NODE_VERSION,
            "db": entry.db,
            "version": entry.version,
            "time": to_micros(entry.time),
        }
    )


# -- decoding --------------------------------------------------------------------


class _Fields:
    """Typed access to a decoded node's fields; failures name the object's key."""

    def __init__(self, node: dict[str, Any], key: str, db: str, version: int | None) -> None:
        self.node = node
        self.key = key
        self.db = db
        self.version = version

    def fail(self, problem: str) -> IntegrityError:
        return JournalEntryDamagedError(self.db, self.version, self.key, problem)

    def get(self, name: str, kinds: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if name not in self.node:
            raise self.fail(f"field {name!r} is missing")
        value = self.node[name]
        if value is None and optional:
            return None
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _tuple(kinds)):
            raise self.fail(f"field {name!r} holds {type(value).__name__} {value!r}")
        return value


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def decode_slot(data: bytes, key: str, db: str, version: int | None) -> JournalEntry | TrimmedEntry:
    """Decode the object at a journal slot (an entry or a tombstone) and check it.

    ``version`` is the version the key names (None for the HEAD hint, whose
    copy names its own). Anything that does not fit is an
    :class:`IntegrityError` naming ``key``.
    """
    try:
        node = decode_node(data)
    except IntegrityError as exc:
        raise JournalEntryDamagedError(db, version, key, f"it does not decode ({exc})") from None
    if not isinstance(node, dict):
        raise _Fields({}, key, db, version).fail(f"it holds a {type(node).__name__}, not a map")
    fields = _Fields(node, key, db, version)
    kind = node.get("type")
    if kind not in (ENTRY_TYPE, TRIMMED_TYPE):
        raise fields.fail(f"its type is {kind!r}, expected {ENTRY_TYPE!r}")
    if node.get("v") != NODE_VERSION or isinstance(node.get("v"), bool):
        if not is_newer_format(node):  # missing, not a number, below 1: damage
            raise fields.fail(f"its format version is {node.get('v')!r}")
        raise IntegrityError(
            f"journal object {key!r} has format version {node.get('v')!r}; this merkle-db "
            f"reads version {NODE_VERSION}: upgrade merkle-db to read it"
        )
    if fields.get("db", str) != db:
        raise fields.fail(f"it belongs to database {node['db']!r}, not {db!r}")
    found = fields.get("version", int)
    if found < 0 or (version is not None and found != version):
        raise fields.fail(f"it holds version {found}, but its key names version {version}")
    micros = fields.get("time", int)
    try:
        when = from_micros(micros)
    except IntegrityError as exc:
        raise fields.fail(str(exc)) from None
    if kind == TRIMMED_TYPE:
        return TrimmedEntry(db, found, when)
    root = fields.get("root", CID, optional=True)
    parent = fields.get("parent", int, optional=True)
    if (found == 0) != (parent is None) or (parent is not None and parent != found - 1):
        raise fields.fail(f"version {found} names parent {parent!r}")
    forked = _parent_link(fields, "forked_from")
    merged = _parent_link(fields, "merged_from") if "merged_from" in node else None
    prev = fields.get("prev", bytes, optional=True) if "prev" in node else None
    if prev is not None and (len(prev) != 32 or parent is None):
        raise fields.fail(f"field 'prev' holds {len(prev)} bytes on version {found}")
    created = fields.get("created", int, optional=True) if "created" in node else None
    if created is not None and not 0 <= created <= found:
        raise fields.fail(f"field 'created' names version {created} on version {found}")
    return JournalEntry(
        db=db,
        version=found,
        root=None if root is None else str(root),
        parent=parent,
        time=when,
        author=fields.get("author", str, optional=True),
        message=fields.get("message", str, optional=True),
        meta=fields.get("meta", dict),
        forked_from=forked,
        merged_from=merged,
        prev=prev,
        created=created,
        digest=entry_digest(data),
    )


def _parent_link(fields: _Fields, name: str) -> dict[str, Any] | None:
    """A ``{db, version}`` link to another journal's entry (or None)."""
    link = fields.get(name, dict, optional=True)
    if link is not None:
        inner = _Fields(link, fields.key, fields.db, fields.version)
        inner.get("db", str)
        inner.get("version", int)
    return link  # type: ignore[no-any-return]
