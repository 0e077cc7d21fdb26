"""The file store's options, as ``merkle.connect`` and ``-o key=value`` give them, and
the check of a path the file system must be able to name.

Options arrive as Python values or as text from a URI or the command line:
the text ``"false"`` is a true value to Python, so each is read by its own
rule here and refused, naming the option, when it is neither.
"""

from __future__ import annotations

import os
from typing import Any

from merkle.errors import UsageError

__all__ = ["check_path", "file_flag", "file_workers"]

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def file_flag(value: Any, name: str) -> bool:
    """A yes/no store option: a bool, 0 or 1, or its text (``-o fsync=false``): the text
    ``"false"`` is a true value to Python, so without this it turned fsync on."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in (*_TRUE, *_FALSE):
        return value.strip().lower() in _TRUE
    raise UsageError(f"file store option {name} must be true or false, got {value!r}")


def file_workers(value: Any) -> int:
    """``bulk_workers``: a whole number of at least 1 (or its text)."""
    number = value
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if isinstance(number, int) and not isinstance(number, bool) and number >= 1:
        return number
    raise UsageError(f"file store option bulk_workers must be a whole number >= 1, got {value!r}")


def check_path(path: str, what: str) -> str:
    """``path`` if the file system can name it; a UsageError naming ``what`` for a NUL
    character or an unpaired surrogate (Python's own errors would come from the first
    file opened, as a ValueError or a UnicodeEncodeError)."""
    if "\x00" in path:
        raise UsageError(f"{what} {path!r} holds a NUL character, which no file name can hold")
    try:
        os.fsencode(path)
    except UnicodeEncodeError:
        raise UsageError(
            f"{what} {path!r} holds a character the file system encoding cannot write "
            "(an unpaired surrogate)"
        ) from None
    return path
