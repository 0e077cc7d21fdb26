"""CAR v1 files: a database version as one portable file, and back.

The format is the IPLD project's CARv1 (https://ipld.io/specs/transport/car/carv1/):

    varint(len(header)) header                  header = DAG-CBOR {roots: [root], version: 1}
    varint(len(cid) + len(data)) cid data        one section per block

``export_car`` writes the database root as the only root and every block it
reaches exactly once, breadth first from the root. ``import_car`` reads a
file twice: first it checks the header, every block against its CID, that
nodes are canonical DAG-CBOR, and that every block the root reaches is in
the file; only then, under a writer lease, does it store the blocks and
commit version 0 of a new database. A refused file stores nothing.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from multiformats import varint

from merkle.blocks.cid import CID, DAG_CBOR, RAW
from merkle.blocks.codec import decode_node, encode_node, iter_links
from merkle.db.dbroot import DbRoot
from merkle.db.landing import land
from merkle.errors import IntegrityError, StorageError, UsageError
from merkle.refs import JournalEntry, WriterTicket
from merkle.storage.base import NO_SPACE
from merkle.storage.file import check_path

if TYPE_CHECKING:
    from merkle.db.connection import Connection
    from merkle.db.database import Database

__all__ = ["CarReport", "export_car", "import_car", "read_car"]

_BATCH = 64
#: A section longer than this is refused before it is read (blocks are far smaller).
_MAX_SECTION = 1 << 31


@dataclass
class CarReport:
    """What an export or import moved: the root, blocks and bytes."""

    root: str
    blocks: int = 0
    bytes: int = 0


def _section(cid: CID, data: bytes) -> bytes:
    return varint.encode(len(cid.bytes) + len(data)) + cid.bytes + data


def export_car(
    conn: Connection,
    db: str,
    out: str | os.PathLike[str] | IO[bytes],
    *,
    version: int | None = None,
) -> CarReport:
    """Write version ``version`` (default: the head) of ``db`` to ``out`` as a CAR v1 file."""
    if isinstance(out, str | os.PathLike):
        out = _car_path(out, "export_car(out=)")
    elif not callable(getattr(out, "write", None)):
        raise UsageError(
            f"export_car(out=) takes a file path or a binary file object open for writing, "
            f"got {type(out).__name__} {out!r}"
        )
    with conn.open_db(db, version=version, lease=True) as source:
        root = CID.parse(source.root)
        if not isinstance(out, (str, os.PathLike)):
            name = getattr(out, "name", None)
            where = f"the CAR file {name}" if isinstance(name, str) else "the CAR output stream"
            try:
                return _write(conn, root, out)
            except OSError as exc:
                raise _write_error(where, exc, partial=True) from exc
        return _export_to(conn, root, os.fspath(out))


def _car_path(path: str | os.PathLike[str], what: str) -> str:
    """``path`` as a str the file system can name; a UsageError naming ``what`` if not (a
    NUL, an unpaired surrogate, a PathLike giving bytes), before the lake is read."""
    name = os.fspath(path)
    if not isinstance(name, str):
        raise UsageError(f"{what} takes a str path, got {type(name).__name__} {name!r}")
    return check_path(name, what)


def _export_to(conn: Connection, root: CID, path: str) -> CarReport:
    """Write the CAR file under a temporary name beside ``path``, renamed when complete.

    So a failed export (a full disk, an error reading a block) leaves no
    truncated file under the name asked for, and an existing file there is
    replaced only by a complete one. A symbolic link is followed: the file it
    names is replaced, the link stays. A path that is not a regular file (a
    pipe, a device, ``/dev/stdout`` whatever it is redirected to) is written
    in place: it cannot be renamed over.
    """
    real = os.path.realpath(path)
    if _in_place(path, real):
        try:
            with _create(path) as handle:
                return _write(conn, root, handle)
        except OSError as exc:  # from a write, or from the flush when it is closed
            raise _write_error(f"the CAR file {path}", exc, partial=True) from exc
    folder = os.path.dirname(real)
    temp = os.path.join(folder, _temporary_name(os.path.basename(real)))
    try:
        with _create(temp, shown=path) as handle:
            report = _write(conn, root, handle)
            os.fsync(handle.fileno())
        os.replace(temp, real)
    except OSError as exc:
        _remove_quietly(temp)
        raise _write_error(f"the CAR file {path}", exc) from exc
    except BaseException:
        _remove_quietly(temp)
        raise
    return report


def _in_place(path: str, real: str) -> bool:
    """Whether ``path`` is written as it is rather than through a temporary renamed over it:
    anything under /dev or /proc (a file descriptor, a device, /dev/stdout even when it is
    redirected to a file), and any existing path that is not a regular file."""
    special = ("/dev/", "/proc/")
    absolute = os.path.abspath(path)
    if absolute.startswith(special) or real.startswith(special):
        return True
    return os.path.exists(real) and not os.path.isfile(real)


#: The longest file name most file systems take (ext4, XFS, APFS: 255 bytes).
_NAME_MAX = 255


def _temporary_name(name: str) -> str:
    """A hidden name beside ``name`` for the export to be written under: the name itself
    with a random part, or, where that would be longer than a file name may be (a
    240-byte name is valid, the temporary for it would not be), without the name."""
    random = uuid.uuid4().hex[:12]
    temp = f".{name}.{random}.partial"
    if len(os.fsencode(temp)) > _NAME_MAX:
        temp = f".merkle-export.{random}.partial"
    return temp


def _write_error(where: str, exc: OSError, *, partial: bool = False) -> StorageError:
    """The StorageError for a CAR export that could not be written (a full disk says so).

    ``partial``: the bytes went straight to ``where`` (a stream, a pipe), so
    part of the file may have been written there; otherwise nothing was, and
    a file already under that name is unchanged.
    """
    left = (
        "part of it may have been written, so discard what was"
        if partial
        else "no file was left under that name (a file already there is unchanged)"
    )
    if exc.errno in NO_SPACE:
        return StorageError(
            f"cannot write {where}: the disk is full ({exc.strerror or exc}); {left}. Free "
            "some space there, or export to another disk"
        )
    return StorageError(f"cannot write {where}: {exc.strerror or exc}; {left}")


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _create(path: str, *, shown: str | None = None) -> IO[bytes]:
    """``path`` opened for writing; a path that cannot be a new file is a UsageError.

    ``shown`` is the name the caller asked for, named in errors instead of
    the temporary ``path`` beside it.
    """
    name = path if shown is None else shown
    try:
        return open(path, "wb")
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(path))
        raise UsageError(
            f"cannot write the CAR file {name}: folder {folder} does not exist; "
            "create it first, or name a file in an existing folder"
        ) from None
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise _write_error(f"the CAR file {name}", exc) from exc
        raise UsageError(
            f"cannot write the CAR file {name}: {exc.strerror or exc}; name a file you may write"
        ) from None


def _write(conn: Connection, root: CID, out: IO[bytes]) -> CarReport:
    header = encode_node({"roots": [root], "version": 1})
    out.write(varint.encode(len(header)) + header)
    report = CarReport(str(root))
    seen = {root.bytes}
    level = [root]
    while level:
        following: list[CID] = []
        for i in range(0, len(level), _BATCH):
            part = level[i : i + _BATCH]
            blocks = conn.blocks.get_many(part)  # verified against their CIDs
            for cid in part:
                data = blocks[cid]
                out.write(_section(cid, data))
                report.blocks += 1
                report.bytes += len(data)
                if cid.codec == DAG_CBOR:
                    for link in iter_links(decode_node(data)):
                        if link.bytes not in seen:
                            seen.add(link.bytes)
                            following.append(link)
        level = following
    out.flush()
    return report


def _cid_at(data: bytes) -> CID:
    """The CID at the start of a section (its length is read from its own varints)."""
    try:
        if data[:2] == b"\x12\x20":
            return CID.from_bytes(data[:34])
        pos = 0
        for _ in range(3):  # version, codec, multihash code
            _, n, _rest = varint.decode_raw(data[pos : pos + 10])
            pos += n
        size, n, _rest = varint.decode_raw(data[pos : pos + 10])
        return CID.from_bytes(data[: pos + n + size])
    except (ValueError, IndexError, UsageError) as exc:
        raise IntegrityError(f"a section does not start with a valid CID ({exc})") from None


def read_car(handle: IO[bytes], where: str) -> tuple[CID, Iterator[tuple[CID, bytes]]]:
    """The root of a CAR v1 stream and its blocks, each verified against its CID."""
    try:
        header = decode_node(_read_frame(handle, where, "header"), strict=True)
    except IntegrityError as exc:  # a CSV or any other file: its first bytes read as a length
        raise IntegrityError(
            f"{where} is not a CAR file (what `merkle export` writes): it does not start "
            f"with a CAR header ({exc})"
        ) from None
    if not isinstance(header, dict) or header.get("version") != 1:
        version = header.get("version") if isinstance(header, dict) else None
        raise IntegrityError(
            f"{where} is not a CAR v1 file (header version {version!r}); merkle import reads CAR v1"
        )
    roots = header.get("roots")
    if not isinstance(roots, list) or len(roots) != 1 or not isinstance(roots[0], CID):
        raise IntegrityError(
            f"{where} names {len(roots) if isinstance(roots, list) else 'no'} roots; a merkle "
            "database export has exactly one root, the database root"
        )

    def blocks() -> Iterator[tuple[CID, bytes]]:
        while True:
            frame = _read_frame(handle, where, "section", eof_ok=True)
            if frame is None:
                return
            cid = _cid_at(frame)
            data = frame[len(cid.bytes) :]
            if cid.version != 1 or cid.codec not in (DAG_CBOR, RAW):
                raise IntegrityError(
                    f"{where} holds block {cid} of codec {cid.codec:#x}: a merkle database "
                    "holds only dag-cbor and raw blocks"
                )
            try:
                cid.verify(data)
            except IntegrityError:
                raise IntegrityError(
                    f"block {cid} in {where} is corrupt: its bytes do not hash to its CID"
                ) from None
            yield cid, data

    return roots[0], blocks()


def _read_frame(handle: IO[bytes], where: str, what: str, *, eof_ok: bool = False) -> Any:
    first = handle.read(1)
    if not first:
        if eof_ok:
            return None
        raise IntegrityError(f"{where} ends before its {what}")
    raw = bytearray(first)
    while raw[-1] & 0x80:
        more = handle.read(1)
        if not more or len(raw) > 9:
            raise IntegrityError(f"{where} holds a malformed length before a {what}")
        raw += more
    try:
        size, _, _ = varint.decode_raw(bytes(raw))
    except ValueError as exc:  # e.g. a length not minimally encoded
        raise IntegrityError(f"{where} holds a malformed length before a {what}: {exc}") from None
    if size == 0 or size > _MAX_SECTION:
        raise IntegrityError(f"{where} holds a {what} of impossible length {size}")
    data = handle.read(size)
    if len(data) != size:
        raise IntegrityError(f"{where} is truncated: a {what} of {size} bytes has {len(data)}")
    return data


def _check(path: str) -> tuple[CID, set[bytes]]:
    """First pass: the root and every block it reaches, all present, valid and canonical."""
    links: dict[bytes, list[CID]] = {}
    with open(path, "rb") as handle:
        root, blocks = read_car(handle, path)
        for cid, data in blocks:
            if cid.codec == DAG_CBOR:
                try:
                    node = decode_node(data, strict=True)
                except IntegrityError as exc:
                    raise IntegrityError(f"block {cid} in {path} is not valid: {exc}") from None
                if cid == root:
                    DbRoot.from_node(node, f"root {cid} in {path}")
                links[cid.bytes] = list(iter_links(node))
            else:
                links.setdefault(cid.bytes, [])
    if root.codec != DAG_CBOR or root.bytes not in links:
        raise IntegrityError(f"{path} does not hold its root block {root}")
    reached = {root.bytes}
    stack = [root]
    while stack:
        for link in links[stack.pop().bytes]:
            if link.bytes not in reached:
                if link.bytes not in links:
                    raise IntegrityError(
                        f"{path} is incomplete: block {link}, which the root reaches, is "
                        "missing; nothing was imported"
                    )
                reached.add(link.bytes)
                stack.append(link)
    return root, reached


def import_car(
    conn: Connection,
    path: str | os.PathLike[str],
    db: str,
    *,
    message: str | None = None,
    author: str | None = None,
) -> Database:
    """Create database ``db`` at version 0 from a CAR v1 file (see the module doc)."""
    if not isinstance(path, str | os.PathLike):
        raise UsageError(
            f"import_car reads a CAR file by its path (twice: to check, then to store), "
            f"not a {type(path).__name__}: save the archive to a file first"
        )
    path = _car_path(path, "import_car(path=)")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UsageError(
            f"{path} is not a regular file (a pipe, a device): an import reads its archive "
            "twice (to check, then to store), so save it to a file first"
        )
    head = conn.refs.head(db)
    if head is not None and not head.dropped:
        raise UsageError(f"database {db!r} already exists in {conn.uri}; import under a new name")
    try:
        root, reached = _check(path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None

    def write(ticket: WriterTicket, first: bool) -> None:
        stored: set[bytes] = set()
        with open(path, "rb") as handle:
            _, blocks = read_car(handle, path)  # read again: the file may have changed since
            batch: list[tuple[CID, bytes]] = []
            for cid, data in blocks:
                if cid.bytes in reached and cid.bytes not in stored:
                    stored.add(cid.bytes)
                    batch.append((cid, data))
                    if len(batch) >= _BATCH:
                        conn.blocks.put_hashed(batch, refresh_before=ticket.lease.start)
                        batch = []
            conn.blocks.put_hashed(batch, refresh_before=ticket.lease.start)
        if stored != reached:
            raise IntegrityError(f"{path} changed while it was imported; nothing was imported")

    def put() -> JournalEntry:
        return conn.refs.commit(
            db,
            None,
            str(root),
            author=author,
            message=message or f"import {os.path.basename(path)}",
            meta={"imported_from": os.path.basename(path)},
        )

    entry = land(conn, db, write, put)
    return conn._database(entry)
