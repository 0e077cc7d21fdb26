"""The one output path of the ``merkle`` command: records and rows in four formats.

Every command that prints records or rows goes through :func:`emit_rows` (a
list of rows: ``scan``, ``get``, ``db list``, ``db log``, ``table list``) or
:func:`emit_record` (one object: ``db describe``, ``table describe``), so the
formats and the rendering of values are the same everywhere:

- ``table``: aligned columns under a header, numbers right-aligned, for
  people; the default when stdout is a terminal.
- ``json``: one JSON array of objects (one object per line inside it).
- ``jsonl``: one JSON object per line; the default when stdout is not a
  terminal, since it streams.
- ``csv``: a header row, then one row per record (RFC 4180 quoting, ``\\n``
  line ends).

``json`` and ``jsonl`` stream; ``table`` and ``csv`` read every row first,
because records are schema-free and the columns (the union of the fields, in
order of first appearance, the key first) are only known at the end.

Values JSON cannot hold are rendered by :func:`jsonable`, the same way in
every format: ``bytes`` as lowercase hex, ``datetime``/``date``/``time`` as
ISO-8601, tuples (and sets) as arrays, NaN and infinities as the strings
``"NaN"``, ``"Infinity"``, ``"-Infinity"``, decimals and anything else as
their ``str``; a mapping as an object keyed by its keys' text, or, when two
keys have the same text, as a list of ``[key, value]`` pairs. In ``table``
and ``csv`` cells a string is shown as it is, null/absent as an empty cell,
and every other value as its compact JSON; ``table`` alone then escapes the
control characters of cells and field names as Python writes them (``\\n``,
``\\t``, ``\\x1b``, ``\\u2028``), so that no value breaks its lines or acts on
the terminal. In ``csv`` an empty string is a
quoted empty field (``""``), so that a reader that tells the two apart
(PostgreSQL's COPY; DuckDB with ``allow_quoted_nulls=false``) reads back what
was stored.
Command-line keys are parsed the same way (``merkle.cli.keys``), so a key
copied from the output can be pasted back.
"""

from __future__ import annotations

import codecs
import datetime
import decimal
import json
import math
import re
import sys
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

import click

__all__ = [
    "FORMATS",
    "cell",
    "default_format",
    "emit_record",
    "emit_rows",
    "format_option",
    "holds_unicode",
    "jsonable",
    "to_json",
    "tolerate_encoding",
]

#: The output formats, in the order ``--help`` lists them.
FORMATS = ("table", "json", "jsonl", "csv")


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (see the module doc for the rules)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return _jsonable_map(value)
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, set | frozenset):
        items = [jsonable(item) for item in value]
        return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))
    if isinstance(value, decimal.Decimal | datetime.timedelta):
        return str(value)
    try:  # numpy scalars and the like (a UUID, which has no .item(), is str() below)
        item = value.item()
    except (AttributeError, TypeError, ValueError):
        return str(value)
    return jsonable(item) if item is not value else str(item)


def _jsonable_map(value: Mapping[Any, Any]) -> dict[str, Any] | list[list[Any]]:
    """A mapping as a JSON object, its keys as their text; or, when two keys have the
    same text (``1`` and ``"1"``, ``b"\\x01"`` and ``"01"``), as a list of
    ``[key, value]`` pairs, the form of a typed map field, so that no entry is lost."""
    shown = {(k if isinstance(k, str) else cell(k)): jsonable(v) for k, v in value.items()}
    if len(shown) == len(value):
        return shown
    return [[jsonable(k), jsonable(v)] for k, v in value.items()]


def to_json(value: Any, *, indent: int | None = None, ascii: bool = False) -> str:
    """The JSON text of ``value`` (rendered by :func:`jsonable`; Unicode kept as is unless
    ``ascii``, which writes ``\\u`` escapes for an output that cannot hold it)."""
    separators = (",", ": ") if indent is not None else (", ", ": ")
    return json.dumps(jsonable(value), ensure_ascii=ascii, indent=indent, separators=separators)


def cell(value: Any) -> str:
    """The text of one value in a ``table`` or ``csv`` cell."""
    data = jsonable(value)
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def default_format() -> str:
    """``table`` when stdout is a terminal, else ``jsonl``."""
    return "table" if sys.stdout.isatty() else "jsonl"


def format_option(fn: Any) -> Any:
    """``--format table|json|jsonl|csv`` (default: :func:`default_format`)."""
    return click.option(
        "--format",
        "-f",
        "fmt",
        type=click.Choice(FORMATS),
        default=None,
        help="Output format (default: table on a terminal, else jsonl).",
    )(fn)


def _stdout() -> IO[str]:
    """stdout, escaping what its encoding cannot hold (see :func:`tolerate_encoding`)."""
    tolerate_encoding(sys.stdout)
    return sys.stdout


def holds_unicode(out: IO[str]) -> bool:
    """Whether ``out`` can encode every character (a UTF encoding, or no encoding at all)."""
    encoding = getattr(out, "encoding", None)
    if not encoding:
        return True
    try:
        return codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        return False


def tolerate_encoding(out: IO[str]) -> None:
    """Make ``out`` write a character its encoding cannot hold as an escape (``\\xe9``,
    ``\\U0001f600``) instead of failing with UnicodeEncodeError half-way through the
    output (``PYTHONIOENCODING=latin-1``, an old Windows console): the value stays
    readable and nothing else is lost. JSON output escapes such characters itself,
    the JSON way (``\\ud83d\\ude00``), so it stays valid JSON."""
    if not holds_unicode(out) and hasattr(out, "reconfigure"):
        out.reconfigure(errors="backslashreplace")


def _columns(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None) -> list[str]:
    """``columns`` then every other field of ``rows``, in order of first appearance."""
    seen: dict[str, None] = dict.fromkeys(columns or ())
    for row in rows:
        for name in row:
            seen.setdefault(name, None)
    return list(seen)


def _width(text: str) -> int:
    """Columns ``text`` takes on a terminal (East Asian wide characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * (width - _width(text))
    return fill + text if right else text + fill


#: What a terminal would act on instead of showing: the C0 and C1 control characters
#: (line breaks, tab, escape, bell, NEL, ...) and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _ESCAPES:
        return _ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _shown(text: str) -> str:
    """``text`` for a ``table`` line: each control character escaped as Python writes it
    (``\\n``, ``\\t``, ``\\x1b``, ``\\u2028``), so that a line break or an escape sequence in
    a value or a field name cannot break the layout or act on the terminal. Only here:
    ``json``, ``jsonl`` and ``csv`` write values exactly."""
    return _CONTROL.sub(_escape, text)


def _table_cell(value: Any) -> str:
    return _shown(cell(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _write_table(out: IO[str], rows: Sequence[Mapping[str, Any]], columns: list[str]) -> None:
    if not columns:
        return
    names = [_shown(name) for name in columns]
    cells = [[_table_cell(row.get(name)) for name in columns] for row in rows]
    if not holds_unicode(out):  # escaped here, so that the columns line up as printed
        encoding: str = getattr(out, "encoding", None) or "ascii"
        names, *cells = [
            [text.encode(encoding, "backslashreplace").decode(encoding) for text in line]
            for line in (names, *cells)
        ]
    right = [
        any(_is_number(row.get(name)) for row in rows)
        and all(_is_number(row.get(name)) or row.get(name) is None for row in rows)
        for name in columns
    ]
    widths = [
        max([_width(name), *(_width(line[i]) for line in cells)]) for i, name in enumerate(names)
    ]
    lines = [
        [_pad(name, widths[i], right[i]) for i, name in enumerate(names)],
        ["-" * width for width in widths],
        *([_pad(text, widths[i], right[i]) for i, text in enumerate(line)] for line in cells),
    ]
    for line in lines:
        out.write("  ".join(line).rstrip() + "\n")


def _write_csv(out: IO[str], rows: Sequence[Mapping[str, Any]], columns: list[str]) -> None:
    if not columns:
        return
    out.write(",".join(_csv_field(name) for name in columns) + "\n")
    for row in rows:
        _write_csv_row(out, row, columns)


def _write_csv_row(out: IO[str], row: Mapping[str, Any], columns: Sequence[str]) -> None:
    fields = (None if row.get(n) is None else cell(row.get(n)) for n in columns)
    out.write(",".join(_csv_field(text) for text in fields) + "\n")


def _csv_field(text: str | None) -> str:
    """One RFC 4180 field: null is an empty field, the empty string a quoted one
    (``""``); quoted too when it holds a comma, a quote or a line break."""
    if text is None:
        return ""
    if text == "" or any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def emit_rows(
    rows: Iterable[Mapping[str, Any]],
    fmt: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    file: IO[str] | None = None,
    fixed: bool = False,
) -> int:
    """Print ``rows`` in ``fmt`` (None: :func:`default_format`); how many were printed.

    ``columns`` come first in ``table`` and ``csv`` (and are shown even when
    no row has them, so a projection's header is stable); the other fields of
    the rows follow. ``json`` and ``jsonl`` print each row's own fields.
    ``fixed``: the rows hold no field but ``columns`` (``merkle diff``'s), so
    ``csv`` knows its header before the rows and prints each as it comes, as
    ``json`` and ``jsonl`` do, instead of reading them all first.
    """
    fmt = fmt or default_format()
    out = file or _stdout()
    ascii = not holds_unicode(out)
    count = 0
    if fmt == "jsonl":
        for row in rows:
            out.write(to_json(row, ascii=ascii) + "\n")
            count += 1
    elif fmt == "json":
        out.write("[")
        for row in rows:
            out.write(("\n" if count == 0 else ",\n") + to_json(row, ascii=ascii))
            count += 1
        out.write("\n]\n" if count else "]\n")
    elif fmt == "csv" and fixed and columns:
        names = list(dict.fromkeys(columns))
        out.write(",".join(_csv_field(name) for name in names) + "\n")
        for row in rows:
            _write_csv_row(out, row, names)
            count += 1
    elif fmt in ("table", "csv"):
        listed = list(rows)
        count = len(listed)
        names = _columns(listed, columns)
        (_write_table if fmt == "table" else _write_csv)(out, listed, names)
    else:
        raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(FORMATS)}")
    out.flush()
    return count


def emit_record(
    record: Mapping[str, Any], fmt: str | None = None, *, file: IO[str] | None = None
) -> None:
    """Print one object (a ``describe``) in ``fmt``.

    ``json`` indents the object, ``jsonl`` puts it on one line, ``csv`` is a
    header and one row, ``table`` shows one ``field  value`` line per field.
    """
    fmt = fmt or default_format()
    out = file or _stdout()
    if fmt == "json":
        out.write(to_json(record, indent=2, ascii=not holds_unicode(out)) + "\n")
    elif fmt == "table":
        names = [_shown(str(name)) for name in record]
        width = max((_width(name) for name in names), default=0)
        for name, value in zip(names, record.values(), strict=True):
            out.write(f"{_pad(name, width, False)}  {_table_cell(value)}".rstrip() + "\n")
    else:
        emit_rows([record], fmt, file=out)
        return
    out.flush()
