"""Reading an object file of a file store whole, in as few system calls as it takes.

Object files are never changed in place (a put renames or links a whole new
file over the name), so the size ``fstat`` reports is the content's.
"""

from __future__ import annotations

import os

__all__ = ["READ_FLAGS", "read_all"]

#: How object files are opened for reading (not inherited by child processes).
READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def read_all(fd: int) -> bytes:
    """The content of an open object file: the size ``fstat`` reports, read at once.

    Object files are never changed in place (a put renames or links a whole
    new file over the name), so the size is the content's; reads continue
    only where the kernel returns less (past 2 GiB), up to that size or the end.
    """
    size = os.fstat(fd).st_size
    data = os.read(fd, size) if size else b""
    if len(data) == size:
        return data
    parts = [data]
    done = len(data)
    while done < size and (chunk := os.read(fd, size - done)):
        parts.append(chunk)
        done += len(chunk)
    return b"".join(parts)
