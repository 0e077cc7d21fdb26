"""An object store in a local directory: one file per key.

Writes never expose a partial file under a key. Every put writes a hidden
temporary file beside its target, fsyncs it, then either renames it over the
key (``put``) or hard-links it to the key (``put_if_absent``: ``link`` fails
when the key exists, so exactly one process wins), and finally fsyncs the
directory so the new name survives a crash. A crash leaves at most a hidden
``.tmp-*`` file, which listings skip.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import stat
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import SplitResult, unquote

from merkle.errors import NotFoundError, StorageError, UsageError
from merkle.storage.base import (
    ObjectInfo,
    ObjectStore,
    check_data,
    check_key,
    check_prefix,
    check_range,
    items_failed,
    quote_location,
)
from merkle.storage.fileerrors import lake_gone, layout_error, write_error
from merkle.storage.filegc import (
    TMP_PREFIX,
    delete_if_older,
    remove_stale_temporaries,
    restore_aside,
)
from merkle.storage.fileio import READ_FLAGS, read_all
from merkle.storage.fileoptions import check_path, file_flag, file_workers

__all__ = ["FileStore", "check_path"]

#: How often a read that missed looks again for its file moved aside and put back.
#: Each look after the first means the file was found and then moved aside again
#: (another collection's candidate, or a collector deleting it in a loop): bounded
#: only so that no read can spin for ever.
_REOPENS = 64


class FileStore(ObjectStore):
    """Objects as files under ``root``; ``fsync=False`` trades crash safety for speed."""

    schemes = ("file",)
    local = True

    def __init__(self, root: str, *, fsync: bool = True, bulk_workers: int = 8) -> None:
        if not os.path.isabs(root):
            raise UsageError(f"file store root must be an absolute path, got {root!r}")
        check_path(root, "lake path")
        self.root = os.path.normpath(root)
        self.fsync = file_flag(fsync, "fsync")
        self.bulk_workers = file_workers(bulk_workers)
        self._dirs_known: set[str] = set()
        self._dirs_lock = threading.Lock()
        if os.path.exists(self.root) and not os.path.isdir(self.root):
            raise UsageError(f"lake path {self.root!r} exists and is not a directory")
        #: Whether the root directory was seen to exist: once it was, it is never made
        #: again (a lake deleted or moved while in use is an error, not a new empty lake).
        self._root_seen = os.path.isdir(self.root)

    @classmethod
    def from_uri(cls, parts: SplitResult, options: Mapping[str, Any]) -> FileStore:
        if parts.netloc not in ("", "localhost"):
            raise UsageError(
                f"malformed file URI {parts.geturl()!r}: use file:///absolute/path "
                "(three slashes) or a plain path"
            )
        if parts.query or parts.fragment:
            raise UsageError(
                f"malformed file URI {parts.geturl()!r}: no query or fragment; write a '?' "
                "or '#' of the path as %3F or %23 (or pass a plain path)"
            )
        path = unquote(parts.path)
        if not path or not os.path.isabs(path):
            raise UsageError(f"malformed file URI {parts.geturl()!r}: the path must be absolute")
        unknown = set(options) - {"fsync", "bulk_workers"}
        if unknown:
            raise UsageError(f"unknown options for file://: {sorted(unknown)}")
        return cls(path, **options)

    @property
    def uri(self) -> str:
        return "file://" + quote_location(self.root)

    def reopen_options(self) -> dict[str, Any]:
        return {"fsync": self.fsync, "bulk_workers": self.bulk_workers}

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def _missing(self, key: str) -> NotFoundError:
        return NotFoundError(f"no object {key!r} in {self.uri}")

    # -- reads ---------------------------------------------------------------

    def get(self, key: str) -> bytes:
        # os.read of the size fstat gives, not open().read(): no buffered reader, no
        # second read to find the end, no resize (a 600-byte node: 30 -> 22 us).
        fd = self._open(key)
        try:
            return read_all(fd)
        except IsADirectoryError:
            raise self._missing(key) from None
        except OSError as exc:
            raise StorageError(f"cannot read {key!r} in {self.uri}: {exc}") from exc
        finally:
            os.close(fd)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        start, length = check_range(key, start, length)
        fd = self._open(key)
        try:
            with open(fd, "rb") as f:
                f.seek(start)
                return f.read(length)
        except IsADirectoryError:
            raise self._missing(key) from None
        except OSError as exc:
            raise StorageError(f"cannot read {key!r} in {self.uri}: {exc}") from exc

    def _open(self, key: str) -> int:
        """A file descriptor of ``key``'s file for reading; a miss looks for a copy a
        killed collector left moved aside (:meth:`_reopen`) before it is NotFoundError."""
        path = self._path(key)
        try:
            return os.open(path, READ_FLAGS)
        except FileNotFoundError:
            return self._reopen(key, path)
        except (IsADirectoryError, NotADirectoryError):
            raise self._missing(key) from None
        except OSError as exc:
            raise StorageError(f"cannot read {key!r} in {self.uri}: {exc}") from exc

    def _reopen(self, key: str, path: str) -> int:
        """After a read missed ``key``: the file opened again once it is put back from a
        copy a collector left moved aside (:meth:`_restore`); else the miss stands."""
        for _ in range(_REOPENS):
            if not self._restore(key, path):
                break
            try:
                return os.open(path, READ_FLAGS)
            except FileNotFoundError:
                continue  # moved aside again meanwhile (another collection's candidate)
            except (IsADirectoryError, NotADirectoryError):
                break
            except OSError as exc:
                raise StorageError(f"cannot read {key!r} in {self.uri}: {exc}") from exc
        raise self._missing(key)

    def stat(self, key: str) -> ObjectInfo:
        path = self._path(key)
        info = self._stat(key, path)
        for _ in range(_REOPENS):  # a miss: as _reopen, look for it moved aside and back
            if info is not None or not self._restore(key, path):
                break
            info = self._stat(key, path)
        if info is None:
            raise self._missing(key)
        return info

    def stat_or_none(self, key: str) -> ObjectInfo | None:
        """:meth:`stat`, or None for a missing key, without looking for a copy a killed
        collector moved aside: for the write path, where a miss is the normal answer
        (a new block) and costs one failed ``stat``."""
        return self._stat(key, self._path(key))

    def exists(self, key: str) -> bool:
        """Whether ``key`` is stored; a miss is one failed ``stat`` (like
        :meth:`stat_or_none`, nothing moved aside is looked for)."""
        return self._stat(key, self._path(key)) is not None

    def _stat(self, key: str, path: str) -> ObjectInfo | None:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StorageError(f"cannot stat {key!r} in {self.uri}: {exc}") from exc
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(key, st.st_size, st.st_mtime)

    def _restore(self, key: str, path: str) -> bool:
        """After a read missed ``key``: whether it is back, put back from the copy a
        collector killed in a conditional delete left moved aside (:func:`restore_aside`;
        one listing of a small or missing directory, so a miss stays cheap)."""
        try:
            return restore_aside(path, self._sync_dir)
        except OSError as exc:
            raise StorageError(
                f"{key!r} is missing from {self.uri} and looking for a copy a collection "
                f"moved aside failed: {exc}"
            ) from exc

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        directory, _, _ = check_prefix(prefix).rpartition("/")
        base = os.path.join(self.root, *directory.split("/")) if directory else self.root
        yield from self._walk(base, directory + "/" if directory else "", prefix)

    def _walk(self, path: str, key_prefix: str, want: str) -> Iterator[ObjectInfo]:
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            self._check_root()
            return
        except OSError as exc:
            raise StorageError(f"cannot list {self._key_of(path)!r} in {self.uri}: {exc}") from exc
        # Sort so that full keys come out in byte order: a directory's keys all
        # start with "name/", so it sorts as "name/".
        ranked = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            ranked.append((entry.name + "/" if is_dir else entry.name, is_dir, entry))
        ranked.sort(key=lambda item: item[0])
        for name, is_dir, entry in ranked:
            key = key_prefix + name
            if is_dir:
                # Descend only where the subtree can hold keys matching the prefix.
                if key.startswith(want) or want.startswith(key):
                    yield from self._walk(entry.path, key, want)
            elif key.startswith(want):
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # deleted while listing
                except OSError as exc:
                    raise StorageError(f"cannot stat {key!r} in {self.uri}: {exc}") from exc
                yield ObjectInfo(key, st.st_size, st.st_mtime)

    def list_prefixes(self, prefix: str = "") -> builtins.list[str]:
        check_prefix(prefix, directory=True)
        path = os.path.join(self.root, *prefix.rstrip("/").split("/")) if prefix else self.root
        try:
            names = os.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            self._check_root()
            return []
        except OSError as exc:
            raise StorageError(f"cannot list {prefix!r} in {self.uri}: {exc}") from exc
        return sorted(name for name in names if not name.startswith("."))

    # -- writes --------------------------------------------------------------

    def _ensure_dir(self, directory: str) -> None:
        """Create ``directory`` and its parents as needed, and make each level's name durable.

        A level found existing is flushed in its parent too (once per store):
        another process may have created it and not flushed its parent yet,
        and an object this store puts in it must not outlive its directory.
        """
        if directory in self._dirs_known:
            return
        if not os.path.isdir(self.root):
            self._check_root()  # again: another thread may have made it and marked it seen
            os.makedirs(self.root, exist_ok=True)
            self._sync_dir(os.path.dirname(self.root))
            self._root_seen = True
        levels = []
        probe = directory
        while probe != self.root and probe not in self._dirs_known:
            levels.append(probe)
            probe = os.path.dirname(probe)
        for level in reversed(levels):
            try:
                os.mkdir(level)
            except FileExistsError:
                if not os.path.isdir(level):
                    raise self._not_a_directory(level) from None
                # Made by another thread or process, which may not have flushed it yet.
            except NotADirectoryError:
                raise self._not_a_directory(level) from None
            self._sync_dir(os.path.dirname(level))
            with self._dirs_lock:
                self._dirs_known.add(level)
        with self._dirs_lock:
            self._dirs_known.add(directory)

    def _key_of(self, path: str) -> str:
        return os.path.relpath(path, self.root).replace(os.sep, "/")

    def _not_a_directory(self, path: str) -> UsageError:
        return layout_error(self._key_of(path), self.uri, is_object=True)

    def _is_a_directory(self, path: str) -> UsageError:
        return layout_error(self._key_of(path), self.uri, is_object=False)

    def _check_root(self) -> None:
        """Raise :meth:`_gone` if the lake directory was seen and is gone (not an empty lake)."""
        if self._root_seen and not os.path.isdir(self.root):
            raise self._gone()

    def _gone(self) -> StorageError:
        return lake_gone(self.root)

    def _write_error(self, key: str, exc: BaseException, detail: str = "") -> StorageError:
        """The StorageError for a failed write of ``key`` (:func:`write_error`)."""
        if isinstance(exc, FileNotFoundError) and self._root_seen and not os.path.isdir(self.root):
            return self._gone()
        return write_error(key, self.uri, self.root, exc, detail)

    def _sync_dir(self, directory: str) -> None:
        if not self.fsync:
            return
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _write_temp(self, path: str, data: bytes, *, sync: bool = True) -> str:
        """Write ``data`` to a hidden temp file beside ``path`` (durable unless ``sync=False``)."""
        directory = os.path.dirname(path)
        self._ensure_dir(directory)
        tmp = os.path.join(directory, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self.fsync and sync:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        os.close(fd)
        return tmp

    def put(self, key: str, data: bytes) -> None:
        self.put_many([(key, data)])

    def put_hint(self, key: str, data: bytes) -> None:
        """Atomic (temp file + rename) but not flushed: a crash may keep the old hint."""
        path = self._path(key)
        if os.path.isdir(path):
            raise self._is_a_directory(path)
        try:
            tmp = self._write_temp(path, check_data(key, data), sync=False)
            os.replace(tmp, path)
        except OSError as exc:
            raise self._write_error(key, exc) from exc

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Write every object to a durable temp file, then rename them all, then sync the dirs.

        No key changes until every new byte is on disk, and all keys are
        durable when this returns.
        """
        staged = [(self._path(key), check_data(key, data)) for key, data in items]
        if not staged:
            return
        self._publish(staged, self._write_temps(staged))

    def _write_temps(self, staged: builtins.list[tuple[str, bytes]]) -> builtins.list[str]:
        """Durable temp files beside every path, written concurrently (none left on error)."""
        for path, _ in staged:
            if os.path.isdir(path):
                raise self._is_a_directory(path)
        temps: builtins.list[str | BaseException] = self.map_bulk(
            lambda pd: self._try_write_temp(pd[0], pd[1]), staged
        )
        failed = [i for i, t in enumerate(temps) if isinstance(t, BaseException)]
        if failed:
            for tmp in temps:
                if isinstance(tmp, str):
                    _unlink_quietly(tmp)
            first = temps[failed[0]]
            assert isinstance(first, BaseException)
            if isinstance(first, UsageError):
                raise first
            others = f"; {len(failed) - 1} more of the {len(staged)} objects failed too"
            detail = f" (nothing was written{others if len(failed) > 1 else ''})"
            key = self._key_of(staged[failed[0]][0])
            raise self._write_error(key, first, detail) from first
        return [t for t in temps if isinstance(t, str)]

    def _publish(self, staged: builtins.list[tuple[str, bytes]], temps: builtins.list[str]) -> None:
        """Rename durable temp files to their paths, then make the names durable."""
        renamed = 0
        try:
            for (path, _), tmp in zip(staged, temps, strict=True):
                assert isinstance(tmp, str)
                os.replace(tmp, path)
                renamed += 1
        except OSError as exc:
            for tmp in temps[renamed:]:
                assert isinstance(tmp, str)
                _unlink_quietly(tmp)
            key = self._key_of(staged[renamed][0])
            written = f" ({renamed} of {len(staged)} objects were written)"
            error = self._write_error(key, exc, written)
            error.definite = renamed == 0
            raise error from exc
        try:
            for directory in sorted({os.path.dirname(path) for path, _ in staged}):
                self._sync_dir(directory)
        except OSError as exc:
            raise StorageError(
                f"wrote {len(staged)} objects to {self.uri} (the first "
                f"{self._key_of(staged[0][0])!r}) but could not flush their directory: {exc}; "
                "they are visible and may not survive a crash",
                definite=False,
            ) from exc

    def put_if_absent_after(
        self, items: Iterable[tuple[str, bytes]], key: str, data: bytes
    ) -> bool:
        """The items' bytes and ``key``'s are written and flushed in one concurrent round;
        then the items are renamed into place and their directories flushed, and only
        then is ``key`` linked (and its directory flushed): three rounds of flushes, not
        four, and ``key`` still never exists before the items are durable."""
        pairs = builtins.list(items)
        staged = [(self._path(k), check_data(k, d)) for k, d in pairs]
        path, data = self._path(key), check_data(key, data)
        if not staged or os.path.lexists(path):
            return super().put_if_absent_after(pairs, key, data)
        temps = self._write_temps([*staged, (path, data)])
        mine = temps.pop()
        try:
            self._publish(staged, temps)
        except BaseException as exc:
            _unlink_quietly(mine)  # ``key`` is never linked: definite as to it
            if isinstance(exc, StorageError) and not exc.definite:
                raise items_failed(key, exc) from exc
            raise
        return self._link_temp(key, path, mine)

    def _try_write_temp(self, path: str, data: bytes) -> str | BaseException:
        """:meth:`_write_temp`, returning the error instead of raising it (for cleanup)."""
        try:
            return self._write_temp(path, data)
        except (OSError, UsageError) as exc:
            return exc

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        data = check_data(key, data)
        if os.path.lexists(path):
            if os.path.isdir(path):
                raise self._is_a_directory(path)
            return False
        try:
            tmp = self._write_temp(path, data)
        except OSError as exc:
            raise self._write_error(key, exc) from exc
        return self._link_temp(key, path, tmp)

    def _link_temp(self, key: str, path: str, tmp: str) -> bool:
        """Hard-link a durable temp file to ``path`` unless it exists; flush the name."""
        try:
            created = self._link(key, tmp, path)
        finally:
            _unlink_quietly(tmp)
        if created:
            try:
                self._sync_dir(os.path.dirname(path))
            except OSError as exc:
                raise StorageError(
                    f"created {key!r} in {self.uri} but could not flush its directory: {exc}; "
                    "it holds the new bytes and may not survive a crash",
                    definite=False,
                ) from exc
        return created

    def _link(self, key: str, tmp: str, path: str) -> bool:
        """Hard-link the temp file to the key; whether this call created the key.

        A link that reports an error may still have happened (an EEXIST for a
        retransmitted NFS request that had succeeded, an EIO after the entry
        was written): the key is this call's exactly when it names the temp
        file's inode, which is what decides, never the error alone.
        """
        try:
            ours = os.stat(tmp)
        except OSError as exc:
            raise self._write_error(key, exc) from exc
        try:
            os.link(tmp, path)
            return True
        except OSError as exc:
            error = exc
        try:
            found = os.stat(path)
        except FileNotFoundError:
            found = None
        except OSError as exc:
            raise StorageError(
                f"conditional write of {key!r} to {self.uri} failed ({error}) and the key "
                f"cannot be read back ({exc}); it may or may not have been created",
                definite=False,
            ) from error
        if found is not None and (found.st_dev, found.st_ino) == (ours.st_dev, ours.st_ino):
            return True
        if isinstance(error, FileExistsError) and found is not None:
            return False
        raise self._write_error(key, error) from error

    def touch(self, key: str) -> None:
        self.set_mtime(key, None)

    def set_mtime(self, key: str, mtime: float | None) -> None:
        """Set ``key``'s modification time (None: now); tests backdate objects with it."""
        path = self._path(key)
        if not os.path.isfile(path):
            raise self._missing(key)
        try:
            os.utime(path, None if mtime is None else (mtime, mtime))
        except (FileNotFoundError, NotADirectoryError):
            raise self._missing(key) from None
        except OSError as exc:
            raise StorageError(f"cannot touch {key!r} in {self.uri}: {exc}") from exc

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except IsADirectoryError:
            raise UsageError(f"{key!r} in {self.uri} is a directory, not an object") from None
        except OSError as exc:
            try:
                still_there = os.path.lexists(path)
            except OSError:
                still_there = False
            raise StorageError(
                f"cannot delete {key!r} in {self.uri}: {exc}", definite=still_there
            ) from exc

    # -- durability and leftovers ----------------------------------------------------

    def make_durable(self, keys: Iterable[str]) -> None:
        """Flush the names of objects found present, which another writer may not have yet.

        Every writer renames or links a file into a key only after fsyncing
        its bytes, so a visible object's bytes are durable and only its name
        (its directory entry) may not be: one directory fsync per directory
        settles it, plus once per store the directories' own names.
        """
        if not self.fsync:
            return
        directories = sorted({os.path.dirname(self._path(key)) for key in keys})
        try:
            for directory in directories:
                self._ensure_dir(directory)
                self._sync_dir(directory)
        except OSError as exc:
            raise StorageError(
                f"cannot flush {self._key_of(directories[0])!r} in {self.uri}: {exc}"
            ) from exc

    def remove_stale_temporaries(self, older_than: float) -> tuple[int, int]:
        """Delete ``.tmp-*`` files last written before ``older_than`` (killed writers' leftovers).

        A writer still using such a file (stalled that long between writing
        and renaming it) gets a StorageError from its rename or link; no key
        changes. Files a killed collector left moved aside before ``older_than``
        are put back under their key if it is missing, else removed.
        """
        return remove_stale_temporaries(self.root, older_than, self.uri, self._sync_dir)

    conditional_delete = True

    def delete_if_older(self, key: str, cutoff: float) -> bool:
        """Remove ``key`` only if its timestamp is still older than ``cutoff`` (checked
        where no writer can refresh it any more); whether it was removed."""
        path = self._path(key)
        if os.path.isdir(path):
            raise UsageError(f"{key!r} in {self.uri} is a directory, not an object")
        return delete_if_older(path, cutoff, self._sync_dir)


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
