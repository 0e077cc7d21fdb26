"""Tags: names for database versions that retention and garbage collection never remove.

A tag is one object ``tags/<db>/<name>``, created with ``put_if_absent`` (a
tag never moves; delete it and tag again to move it)::

    {type: "merkle/tag", v: 1, db, name, version, root: link, time,
     author, message, entry: bytes}

``entry`` is a copy of the tagged version's journal entry, byte for byte.
The journal keeps only the versions from its retention floor to its head;
the tag keeps its version apart from that: the root link makes the tag a
garbage-collection root of its own, and the entry copy lets the version be
opened (by tag or by number) after retention has trimmed its slot. Tags
live outside ``refs/<db>/`` so that the journal's own objects stay exactly
what the journal protocol expects there (see ``doc/versions.md``).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import UTC, datetime

from merkle.blocks.cid import CID
from merkle.blocks.codec import NODE_VERSION, decode_object, encode_node
from merkle.errors import IntegrityError, NotFoundError, UsageError
from merkle.refs.entry import (
    JournalEntry,
    decode_slot,
    encode_entry,
    from_micros,
    to_micros,
)
from merkle.refs.errors import JournalEntryDamagedError
from merkle.refs.names import check_db_name, check_tag_name
from merkle.storage.base import ObjectStore

__all__ = ["TAGS_PREFIX", "TAG_TYPE", "Tag", "TagManager", "tag_key"]

TAG_TYPE = "merkle/tag"
TAGS_PREFIX = "tags/"


def tag_key(db: str, name: str) -> str:
    """The key of tag ``name`` of database ``db``."""
    return f"{TAGS_PREFIX}{db}/{name}"


@dataclass(frozen=True)
class Tag:
    """A name for one committed version of a database."""

    db: str
    name: str
    version: int
    root: str
    time: datetime
    author: str | None = None
    message: str | None = None
    entry: JournalEntry | None = None  # the tagged version's journal entry


def _encode(tag: Tag) -> bytes:
    assert tag.entry is not None
    return encode_node(
        {
            "type": TAG_TYPE,
            "v": NODE_VERSION,
            "db": tag.db,
            "name": tag.name,
            "version": tag.version,
            "root": CID.parse(tag.root),
            "time": to_micros(tag.time),
            "author": tag.author,
            "message": tag.message,
            "entry": encode_entry(tag.entry),
        }
    )


def _decode(data: bytes, key: str, db: str, name: str) -> Tag:
    def damaged(problem: str) -> IntegrityError:
        return IntegrityError(
            f"tag object {key!r} is damaged: {problem}; delete the tag and create it again"
        )

    node = decode_object(data, TAG_TYPE, damaged)
    if node.get("v") != NODE_VERSION:
        raise IntegrityError(
            f"tag object {key!r} has format version {node.get('v')!r}; this merkle-db reads "
            f"version {NODE_VERSION}: upgrade merkle-db to read it"
        )
    try:
        copy = node["entry"]
        if not isinstance(copy, bytes):
            raise TypeError("entry must be the bytes of a journal entry")
        entry = decode_slot(copy, key, db, node["version"])
        if not isinstance(entry, JournalEntry):
            raise TypeError("entry is not a journal entry")
        tag = Tag(
            db=node["db"],
            name=node["name"],
            version=node["version"],
            root=str(node["root"]),
            time=from_micros(node["time"]),
            author=node.get("author"),
            message=node.get("message"),
            entry=entry,
        )
        ok = entry.root == tag.root and (
            isinstance(node["root"], CID)
            and isinstance(tag.version, int)
            and not isinstance(tag.version, bool)
            and tag.version >= 0
            and isinstance(node["time"], int)
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise damaged(f"a field is missing or malformed ({exc})") from None
    except JournalEntryDamagedError as exc:  # its advice is the journal's, not a tag's
        raise damaged(f"its copy of the journal entry is damaged ({exc.problem})") from None
    if not ok:
        raise damaged("its version, root or time is malformed")
    if (tag.db, tag.name) != (db, name):
        raise damaged(f"it names tag {tag.name!r} of database {tag.db!r}")
    return tag


class TagManager:
    """Create, read, list and delete the tags of a lake's databases."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def create(
        self,
        entry: JournalEntry,
        name: str,
        *,
        author: str | None = None,
        message: str | None = None,
    ) -> Tag:
        """Tag the version of ``entry`` as ``name``; UsageError if the name is taken."""
        db, name = check_db_name(entry.db), check_tag_name(name)
        if entry.root is None:
            raise UsageError(f"version {entry.version} of {db!r} is a drop; it cannot be tagged")
        for what, text in (("author", author), ("message", message)):
            if text is not None and not isinstance(text, str):
                raise UsageError(f"{what} must be a string or None, got {type(text).__name__}")
        when = datetime.now(UTC)
        tag = Tag(db, name, entry.version, entry.root, when, author, message, entry)
        if not self.store.put_if_absent(tag_key(db, name), _encode(tag)):
            existing = self.get(db, name)
            raise UsageError(
                f"tag {name!r} of database {db!r} already names version {existing.version}; "
                "a tag never moves: delete it first to tag another version"
            )
        return tag

    def get(self, db: str, name: str) -> Tag:
        """Tag ``name`` of ``db``; NotFoundError if there is none."""
        key = tag_key(check_db_name(db), check_tag_name(name))
        try:
            data = self.store.get(key)
        except NotFoundError:
            raise NotFoundError(f"database {db!r} has no tag {name!r}") from None
        return _decode(data, key, db, name)

    def list(self, db: str) -> list[Tag]:
        """The tags of ``db``, sorted by name (IntegrityError for a damaged one)."""
        read = self._read(db)
        for found in read:
            if isinstance(found, IntegrityError):
                raise found
        return [found for found in read if isinstance(found, Tag)]

    def audit(
        self, db: str | None = None
    ) -> tuple[builtins.list[Tag], builtins.list[tuple[str, str]]]:
        """The readable tags of ``db`` (None: of every database), and ``(db, problem)`` for
        each damaged one: for ``merkle verify``, which reports damage instead of stopping."""
        tags: builtins.list[Tag] = []
        damaged: builtins.list[tuple[str, str]] = []
        for name in [db] if db is not None else self._databases():
            for found in self._read(name):
                if isinstance(found, Tag):
                    tags.append(found)
                else:
                    damaged.append((name, str(found)))
        return tags, damaged

    def _read(self, db: str) -> builtins.list[Tag | IntegrityError]:
        """Each tag of ``db`` in name order, decoded, or the IntegrityError saying why not."""
        prefix = f"{TAGS_PREFIX}{check_db_name(db)}/"
        keys = [info.key for info in self.store.list(prefix)]
        names = [key[len(prefix) :] for key in keys if "/" not in key[len(prefix) :]]
        blobs = self.store.map_bulk(self._fetch, [tag_key(db, n) for n in names])
        out: builtins.list[Tag | IntegrityError] = []
        for n, data in zip(names, blobs, strict=True):
            if data is None:
                continue
            try:
                out.append(_decode(data, tag_key(db, n), db, n))
            except IntegrityError as exc:
                out.append(exc)
        return out

    def _databases(self) -> builtins.list[str]:
        names = []
        for db in self.store.list_prefixes(TAGS_PREFIX):
            try:
                names.append(check_db_name(db))
            except UsageError:
                continue
        return names

    def _fetch(self, key: str) -> bytes | None:
        try:
            return self.store.get(key)
        except NotFoundError:
            return None  # deleted between the listing and the read

    def all(self) -> builtins.list[Tag]:
        """Every tag of every database in the lake (garbage-collection roots)."""
        out: builtins.list[Tag] = []
        for db in self._databases():
            out += self.list(db)
        return out

    def keeping(self, db: str, version: int) -> Tag | None:
        """A tag of ``db`` that names ``version`` (None if no tag does)."""
        return next((t for t in self.list(db) if t.version == version), None)

    def delete(self, db: str, name: str) -> Tag | None:
        """Remove tag ``name`` of ``db`` (the version may then be trimmed); the tag removed,
        or None when its object was damaged (removed all the same: that is the way out the
        damage error names)."""
        try:
            tag: Tag | None = self.get(db, name)
        except IntegrityError:
            tag = None
        self.store.delete(tag_key(db, name))
        return tag
