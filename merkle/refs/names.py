"""Database names: what is allowed, checked once at every entry point.

A database name becomes one path segment of object keys (``refs/<db>/...``),
so it must be a valid segment on every backend and must never let one
database reach into another's keys. Allowed: any Unicode text in NFC form of
at most 255 UTF-8 bytes, except that it may not

* be empty, start with ``.`` (which also rules out ``.`` and ``..``), or
  start or end with whitespace;
* contain ``/``, ``\\`` or a control character (Unicode category ``Cc``).

``shop``, ``shop-dev``, ``Sales 2024``, ``données`` and ``日本`` are fine.
"""

from __future__ import annotations

import unicodedata

from merkle.errors import UsageError

__all__ = ["MAX_NAME_BYTES", "check_db_name", "check_tag_name"]

#: Longest name in UTF-8 bytes: a file name segment on common file systems.
MAX_NAME_BYTES = 255

_ALLOWED = (
    "names are at most 255 UTF-8 bytes of NFC text without '/', '\\' or control "
    "characters, not starting with '.' and not starting or ending with whitespace"
)


def check_db_name(name: object) -> str:
    """Return ``name`` if it is a valid database name, else raise :class:`UsageError`."""
    if not isinstance(name, str):
        raise UsageError(f"a database name must be a string, got {type(name).__name__}")
    problem = _problem(name)
    if problem:
        raise UsageError(f"invalid database name {name!r}: {problem}; {_ALLOWED}")
    return name


def check_tag_name(name: object) -> str:
    """Return ``name`` if it is a valid tag name (the rules of database names), else UsageError."""
    if not isinstance(name, str):
        raise UsageError(f"a tag name must be a string, got {type(name).__name__}")
    problem = _problem(name)
    if problem:
        raise UsageError(f"invalid tag name {name!r}: {problem}; {_ALLOWED}")
    return name


def _problem(name: str) -> str:
    if not name:
        return "it is empty"
    if name[0] == ".":
        return "it starts with '.'"
    if "/" in name:
        return "it contains '/'"
    if "\\" in name:
        return "it contains a backslash"
    if any(unicodedata.category(ch) == "Cc" for ch in name):
        return "it contains a control character"
    if name[0].isspace() or name[-1].isspace():
        return "it starts or ends with whitespace"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it holds an unpaired surrogate, which UTF-8 cannot store"
    if size > MAX_NAME_BYTES:
        return f"it is {size} bytes long in UTF-8"
    normal = unicodedata.normalize("NFC", name)
    if normal != name:
        return f"it is not in Unicode NFC form (write {normal!r})"
    return ""
