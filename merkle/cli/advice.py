"""Library advice restated for the command line.

Messages of :mod:`merkle` errors say what to do in Python terms
(``alter_schema(table, free=['x'])``, ``pass base=``). A command-line user
needs the command or option that does it, so :func:`for_cli` rewrites each
piece of Python advice the commands can surface into the command or option
that does the same (``merkle table alter shop t --free x``, ``--base N``);
advice with no command-line equivalent is marked as the Python API's.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["for_cli"]

#: A field name as the library quotes it (``repr`` of a str).
_NAME = r"(?P<name>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"


def _unquoted(match: re.Match[str]) -> str:
    """The field name of ``match`` as typed on a command line (quoted only if it must be)."""
    name = match.group("name")[1:-1]
    return name if re.fullmatch(r"[\w.-]+", name) else repr(name)


def _rules(db: str, table: str) -> list[tuple[str, str | Callable[[re.Match[str]], str]]]:
    alter = f"merkle table alter {db} {table}"
    create = f"merkle table create {db} {table}"

    def option(flag: str, suffix: str = "") -> Callable[[re.Match[str]], str]:
        return lambda m: f"{alter} {flag} {_unquoted(m)}{suffix}"

    def ns(m: re.Match[str]) -> str:
        kind = f"{_unquoted(m)}:{m.group('kind')}[ns]"
        return f"({create} --schema {kind} or {alter} --add {kind} before the first write of it)"

    return [
        (r"; CLI: merkle table alter DB T --free [^\s)]+", ""),
        (r"alter_schema\(table, free=\[" + _NAME + r"\]\)", option("--free")),
        (r"alter_schema\(table, nullable=\[" + _NAME + r"\]\)", option("--nullable")),
        (r"alter_schema\(table, widen=\{" + _NAME + r": \.\.\.\}\)", option("--widen", ":TYPE")),
        (
            r"\(create_table\(schema=\.\.\.\) or alter_schema\(table, add=\[\("
            + _NAME
            + r", pa\.(?P<kind>timestamp|duration)\('ns'\)\)\]\) before the first write of it\)",
            ns,
        ),
        (r", write Arrow, or round", ", load it from Parquet, or round"),
        (
            r"create_table\(schema=\.\.\.\) with merkle\.free_field\(" + _NAME + r"\)",
            lambda m: f"{create} --schema-free {_unquoted(m)}",
        ),
        (r"merkle\.free_field\(" + _NAME + r"\)", lambda m: f"--schema-free {_unquoted(m)}"),
        (r"\(alter_schema\)", lambda m: f"({alter})"),
        (r"\balter_schema\b(?! names)", "merkle table alter"),
        (
            r"read it as Arrow \(to_arrow, to_batches, get_arrow\)",
            "leave the field out (--fields), or read it as Arrow in Python (Database.to_arrow)",
        ),
        (r"pass base= \(a Database or a version of", "pass --base N (a version of"),
        (r"pass base= explicitly \(a Database, or a version", "pass --base N (a version"),
        (r"which resolve= does not settle", "which --resolve does not settle"),
        (
            r" \(or commit\(rebase=False\) to be told of any concurrent commit instead of "
            r"replaying\)",
            "",
        ),
        (r"open the database again and redo (?:its changes|them)", "run the command again"),
        (r"pass create=True to merkle\.connect; CLI: ", ""),
        (r"\w+ \(connect\(\w+=\), (-o \w+=N)\)", r"\1"),
        (r", or pass aws_access_key_id= and aws_secret_access_key=", ""),
        (
            r"pass options as keyword arguments \(endpoint_url=\.\.\., region_name=\.\.\.\)",
            "pass options with -o (-o endpoint_url=..., -o region_name=...)",
        ),
        (
            r"trim them with conn\.refs\.trim\(db, first_version_to_keep\)",
            "trim them with `merkle db trim DB --below FIRST_VERSION_TO_KEEP`",
        ),
        (
            r"with conn\.refs\.trim\(" + _NAME + r", (?P<below>\d+)\)",
            lambda m: f"with `merkle db trim {_unquoted(m)} --below {m.group('below')}`",
        ),
    ]


def for_cli(message: str, db: str | None = None, table: str | None = None) -> str:
    """``message`` with its Python advice restated as the command or option that does the
    same; ``db`` and ``table`` fill in the commands (``DB``, ``TABLE`` when not known)."""
    if not any(mark in message for mark in ("(", "=")):
        return message
    for pattern, replacement in _rules(db or "DB", table or "TABLE"):
        message = re.sub(pattern, replacement, message)
    return message
