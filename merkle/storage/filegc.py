"""What a collection does to a file store's objects: a conditional delete, the
recovery of objects a killed collector left moved aside, and the removal of
temporary files killed writers left behind.

Kept apart from :mod:`merkle.storage.file` (reads and writes): these work on paths
the store hands them and raise the store's errors.

A conditional delete moves the object's file aside before it decides: into the
hidden directory :data:`ASIDE_DIR` beside it, as ``.tmp-<32 hex>-aside-<name>``,
a name that says which object the bytes are. A collector killed between moving
a refreshed object aside and putting it back leaves its bytes there, and they
are put back under ``<name>``: by the first read that misses the object
(:func:`restore_aside`) or by the next collection's sweep
(:func:`remove_stale_temporaries`). A directory of their own keeps a miss cheap:
looking for them is one listing of a directory that is usually missing or
empty, never of a directory of every block.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import uuid
from collections.abc import Callable

from merkle.errors import StorageError, UsageError

__all__ = [
    "ASIDE_DIR",
    "ASIDE_NAME",
    "TMP_NAME",
    "TMP_PREFIX",
    "delete_if_older",
    "remove_stale_temporaries",
    "restore_aside",
]

#: Temporary files (a write before its rename, an object moved aside) start so.
TMP_PREFIX = ".tmp-"
#: A write in flight (or a killed writer's leftover): nothing else is ever named so.
TMP_NAME = re.compile(re.escape(TMP_PREFIX) + "[0-9a-f]{32}")
#: The hidden directory, beside an object's file, that a conditional delete moves
#: the file into before it decides (hidden: listings and older sweeps skip it).
ASIDE_DIR = TMP_PREFIX + "aside"
#: A file moved aside: group 1 is the object's file name in the directory above.
ASIDE_NAME = re.compile(re.escape(TMP_PREFIX) + "[0-9a-f]{32}-aside-(.+)", re.DOTALL)
#: The longest file name most file systems take, in bytes.
_NAME_MAX = 255

SyncDir = Callable[[str], None]


def _aside_path(path: str) -> str:
    """A new, unique name in :data:`ASIDE_DIR` for the file at ``path`` (which it names)."""
    directory, name = os.path.split(path)
    aside = f"{TMP_PREFIX}{uuid.uuid4().hex}-aside-{name}"
    if len(os.fsencode(aside)) > _NAME_MAX:
        raise UsageError(
            f"cannot delete {path!r} conditionally: its file name is too long to be moved "
            f"aside under a name that says what it is (at most {_NAME_MAX - 44} bytes); "
            "delete it unconditionally"
        )
    return os.path.join(directory, ASIDE_DIR, aside)


def _move_aside(path: str, aside: str, sync_dir: SyncDir) -> None:
    """Rename ``path`` to ``aside``, making :data:`ASIDE_DIR` (durably) if it is missing."""
    try:
        os.rename(path, aside)
        return
    except FileNotFoundError:
        if not os.path.lexists(path):
            raise  # the object is gone: removed already
        # The directory was missing when renaming (another thread deleting beside this one
        # may have made it since: then the rename is simply tried again).
        holder = os.path.dirname(aside)
        with contextlib.suppress(FileExistsError):
            os.mkdir(holder)
        sync_dir(os.path.dirname(holder))  # its name must outlive a crash before a file in it
    os.rename(path, aside)


def delete_if_older(path: str, cutoff: float, sync_dir: SyncDir) -> bool:
    """Remove the file at ``path`` only if its timestamp is still older than ``cutoff``;
    whether it was removed.

    A collector decides what to delete from timestamps read earlier, and a
    writer that reuses an object since refreshes its timestamp (touch). The
    file is first moved aside, atomically, and its timestamp read there, where
    no writer can touch it any more: a refreshed object is put back, an old
    one removed. So a collector that stalled past its lock (a paused process)
    cannot remove an object a writer relied on after the lock expired; a
    writer whose touch finds the file moved aside writes it again. A reader
    that looks in the moment between the move and the put back puts it back
    itself (:func:`restore_aside`), as does the next collection's sweep if
    this collector is killed before it does.

    So a collector may find, when it goes on, its file put back by someone else
    (its aside name gone, or the object's name present again): it leaves the
    object alone and says it did not remove it. Putting back an object a
    collector meant to delete is harmless: it is an old object, which the next
    collection removes; putting back a refreshed one is what must happen. The
    objects deleted so are content-addressed (blocks), so whatever copy ends up
    under the name holds the same bytes.
    """
    aside = _aside_path(path)
    try:
        _move_aside(path, aside, sync_dir)
    except (FileNotFoundError, NotADirectoryError):
        return False  # removed already, or never there
    except OSError as exc:
        raise StorageError(f"cannot remove {path!r}: {exc}", definite=True) from exc
    directory = os.path.dirname(path)
    try:
        try:
            st = os.stat(aside)
        except FileNotFoundError:
            return False  # put back by a reader or a sweep meanwhile
        if st.st_mtime < cutoff:
            try:
                os.unlink(aside)
            except FileNotFoundError:
                return False  # put back by a reader or a sweep meanwhile
            # Put back (or written again) after the move and before the unlink: present.
            return not os.path.lexists(path)
        # Refreshed meanwhile: back under its name (unless a writer that found it gone
        # wrote it again, or a reader put it back: that copy stands).
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        except FileNotFoundError:
            return False  # put back by a reader or a sweep, which removed the aside name
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)
        sync_dir(directory)  # the name put back must survive a crash
        return False
    except OSError as exc:
        raise StorageError(
            f"moved {path!r} aside to remove it, then failed: {exc}; if it is missing, "
            f"{aside!r} holds its bytes (the next read of it, or the next collection, "
            "puts them back)",
            definite=False,
        ) from exc


def restore_aside(path: str, sync_dir: SyncDir) -> bool:
    """Put back the file at ``path`` from a copy a conditional delete moved aside, when
    ``path`` is missing; whether ``path`` exists now (put back by this call or by another).

    For a read that misses: one listing of :data:`ASIDE_DIR` beside ``path``, which is
    missing (nothing was ever deleted conditionally there) or holds only the few files
    collectors are deciding about right now and those killed collectors left. The name
    is linked, not renamed, back (so a name another process put there stands) and made
    durable before the aside name is removed.
    """
    directory, name = os.path.split(path)
    holder = os.path.join(directory, ASIDE_DIR)
    try:
        names = os.listdir(holder)
    except (FileNotFoundError, NotADirectoryError):
        return os.path.lexists(path)  # put back by its collector since the miss, perhaps
    for candidate in sorted(names):
        match = ASIDE_NAME.fullmatch(candidate)
        if match is None or match.group(1) != name:
            continue
        aside = os.path.join(holder, candidate)
        try:
            os.link(aside, path)
        except FileNotFoundError:
            continue  # removed meanwhile (by its collector, or put back by another reader)
        except FileExistsError:
            return True  # put back (or written again) by someone else
        sync_dir(directory)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)
        return True
    # No copy aside (any more): its collector may have put the file back between the
    # reader's miss and this listing (a refreshed block), so look once more.
    return os.path.lexists(path)


def _settle_asides(
    directory: str, older_than: float, sync_dir: SyncDir, fail: Callable[[OSError], None]
) -> tuple[int, int]:
    """Put back or remove the files moved aside in ``directory``'s :data:`ASIDE_DIR`
    before ``older_than`` (by their status-change time, which the move set); (files
    removed, their bytes). A file whose object is missing is put back (not counted);
    one whose object is present is a redundant copy and removed.

    Younger ones are left to their collector, which may still be deciding: a read that
    misses their object puts them back at once, whatever their age.
    """
    holder = os.path.join(directory, ASIDE_DIR)
    try:
        names = os.listdir(holder)
    except (FileNotFoundError, NotADirectoryError):
        return 0, 0
    except OSError as exc:
        fail(exc)
        return 0, 0
    removed = size = 0
    for name in sorted(names):
        match = ASIDE_NAME.fullmatch(name)
        if match is None:
            continue
        aside = os.path.join(holder, name)
        original = os.path.join(directory, match.group(1))
        try:
            st = os.lstat(aside)
            if not stat.S_ISREG(st.st_mode) or st.st_ctime >= older_than:
                continue
            try:
                os.link(aside, original)
                restored = True
            except FileExistsError:
                restored = False
            if restored:
                sync_dir(directory)
            os.unlink(aside)
        except FileNotFoundError:
            continue  # put back or removed meanwhile
        except OSError as exc:
            raise StorageError(
                f"cannot put back or remove {aside!r} (a file a collection moved aside): {exc}"
            ) from exc
        if not restored:
            removed += 1
            size += st.st_size
    return removed, size


def remove_stale_temporaries(
    root: str, older_than: float, where: str, sync_dir: SyncDir
) -> tuple[int, int]:
    """Delete temporary files under ``root`` (the store at ``where``) last written
    before ``older_than``; how many and their bytes. A writer still using such a file
    (stalled that long between writing and renaming it) gets a StorageError from its
    rename or link.

    Files a killed collector left moved aside are not deleted blindly: each is put
    back under its object's name if that is missing, else removed
    (:func:`_settle_asides`)."""
    removed = size = 0

    def fail(exc: OSError) -> None:
        raise StorageError(f"cannot scan {where} for temporary files: {exc}") from exc

    for directory, subdirs, names in os.walk(root, onerror=fail):
        if ASIDE_DIR in subdirs:
            count, nbytes = _settle_asides(directory, older_than, sync_dir, fail)
            removed += count
            size += nbytes
        subdirs[:] = [name for name in subdirs if not name.startswith(".")]
        for name in names:
            if not TMP_NAME.fullmatch(name):
                continue
            path = os.path.join(directory, name)
            try:
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode) or st.st_mtime >= older_than:
                    continue
                os.unlink(path)
            except FileNotFoundError:
                continue  # renamed or removed meanwhile
            except OSError as exc:
                raise StorageError(f"cannot remove the temporary file {path!r}: {exc}") from exc
            removed += 1
            size += st.st_size
    return removed, size
