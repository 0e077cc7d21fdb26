"""What a collection does to a file store's objects: a conditional delete, and the
removal of temporary files killed writers left behind.

Kept apart from :mod:`merkle.storage.file` (reads and writes): both work on paths
the store hands them and raise the store's errors.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import uuid
from collections.abc import Callable

from merkle.errors import StorageError

__all__ = ["TMP_NAME", "TMP_PREFIX", "delete_if_older", "remove_stale_temporaries"]

#: Temporary files (a write before its rename, an object moved aside) start so.
TMP_PREFIX = ".tmp-"
TMP_NAME = re.compile(re.escape(TMP_PREFIX) + "[0-9a-f]{32}")


def delete_if_older(path: str, cutoff: float, sync_dir: Callable[[str], None]) -> bool:
    """Remove the file at ``path`` only if its timestamp is still older than ``cutoff``;
    whether it was removed.

    A collector decides what to delete from timestamps read earlier, and a
    writer that reuses an object since refreshes its timestamp (touch). The
    file is first moved aside, atomically, and its timestamp read there, where
    no writer can touch it any more: a refreshed object is put back, an old
    one removed. So a collector that stalled past its lock (a paused process)
    cannot remove an object a writer relied on after the lock expired; a
    writer whose touch finds the file moved aside writes it again. A reader
    that looks in the moment between the move and the put back finds the
    object missing, which it can read again; a removal is never undone.
    """
    directory = os.path.dirname(path)
    aside = os.path.join(directory, f"{TMP_PREFIX}{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except (FileNotFoundError, NotADirectoryError):
        return False  # removed already, or never there
    except OSError as exc:
        raise StorageError(f"cannot remove {path!r}: {exc}", definite=True) from exc
    try:
        if os.stat(aside).st_mtime < cutoff:
            os.unlink(aside)
            return True
        # Refreshed meanwhile: back under its name (unless a writer that found it gone
        # wrote it again: that copy stands).
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        os.unlink(aside)
        sync_dir(directory)  # the name put back must survive a crash
        return False
    except OSError as exc:
        raise StorageError(
            f"moved {path!r} aside to remove it, then failed: {exc}; if it is missing, "
            f"{aside!r} holds its bytes",
            definite=False,
        ) from exc


def remove_stale_temporaries(root: str, older_than: float, where: str) -> tuple[int, int]:
    """Delete temporary files under ``root`` (the store at ``where``) last written
    before ``older_than``; how many and their bytes. A writer still using such a file
    (stalled that long between writing and renaming it) gets a StorageError from its
    rename or link."""
    removed = size = 0

    def fail(exc: OSError) -> None:
        raise StorageError(f"cannot scan {where} for temporary files: {exc}") from exc

    for directory, subdirs, names in os.walk(root, onerror=fail):
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
