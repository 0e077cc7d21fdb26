"""Why ``merkle load`` could not read a file, in one line naming where.

Rows are counted one way in every message: ``row N`` is the N-th record of
the file, counting from 1 (a CSV header is not a row; without line breaks
inside cells, row N of a CSV file is its line N + 1). pyarrow's own messages
count rows from 0 within the block being read (``in row 0``); they are
restated here in that count, or, where the row cannot be found, say after
which row the block began.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from merkle.cli.jsonrefusal import first_refused, json_rows, refusal
from merkle.cli.rendered import BadValueError, example, is_binary
from merkle.cli.sources import (
    BLOCK_SIZE,
    Input,
    ReadOptions,
    Source,
    csv_parse_options,
    csv_reader,
)
from merkle.cli.typedjson import json_line

__all__ = ["bad_value", "locate_json_error", "read_error"]

#: pyarrow's row, counted from 0 in the block, at the end of its JSON errors.
_IN_ROW = re.compile(r"\s+in row (\d+)$")
#: pyarrow's JSON error for a column whose values (or a part of them: ``/m/[]``, ``/m/x``)
#: change kind; group 1 is the column, group 2 the part inside it (empty for the values),
#: groups 3 and 4 the kinds.
_CHANGED = re.compile(r"Column\(/([^/()]+)([^()]*)\) changed from (\w+) to (\w+)")


def where(read: int) -> str:
    """Where a block that failed began, in the count of rows (see the module doc)."""
    return f"after row {read}" if read else "in the first rows"


def read_error(
    source: Source,
    options: ReadOptions,
    schema: pa.Schema | None,
    read: int,
    exc: BaseException,
    make_free: Callable[[str], str] | None = None,
) -> str:
    """The one line saying why ``source`` could not be read (the row, where it is found).
    ``read``: the rows of the file read before the block that failed; ``make_free``: the
    commands that make a field schema-free in the table loaded (for the advice to a field
    whose values differ in kind, which no Arrow type holds)."""
    head = f"cannot read {source.name} as {source.fmt}: "
    if isinstance(exc, UnicodeDecodeError):
        return head + (
            f"a column name is not UTF-8 (byte 0x{exc.object[exc.start]:02x}); "
            "re-encode the file as UTF-8 (a Latin-1 file: iconv -f latin1 -t utf-8)"
        )
    if source.compressed and isinstance(exc, OSError):
        codec = source.path.rsplit(".", 1)[-1]
        return head + (
            f"its compressed data is truncated or corrupt ({short(exc)}, {where(read)}); "
            f"compress or download the .{codec} file again"
        )
    expected = options.reader_types()
    if schema is not None:
        expected = {**{f.name: f.type for f in schema}, **expected}
    found = (
        locate_csv_error(source, options, expected)
        or _locate_csv_row(source, options)
        or locate_json_error(source, options, read)
    )
    if found:
        return head + found
    text = short(exc)
    in_row = _IN_ROW.search(text)
    if in_row is None:
        return head + f"{text} ({where(read)})"
    said = f"row {read + int(in_row.group(1)) + 1}: {text[: in_row.start()]}"
    changed = _CHANGED.search(said)
    if changed is not None and changed.group(1) in expected:  # stdin: not read again
        name = changed.group(1)
        said += f"; field {name!r} is read as {expected[name]}: write {_how(expected[name])}"
    elif changed is not None and changed.group(1) not in options.free:
        # A column inferred from its first values, then another kind: no type given to it
        # reads both (pyarrow's JSON reader converts no kind to another: a number is not
        # read as a string); a field whose values differ in kind is a schema-free field.
        kinds = {changed.group(3), changed.group(4)}
        said += _changed_advice(changed.group(1), changed.group(2), kinds, make_free)
    return head + said


def _changed_advice(
    name: str, inside: str, kinds: set[str], make_free: Callable[[str], str] | None
) -> str:
    """The advice to a JSON column ``name`` whose values (``inside``: a part of them,
    such as ``/[]``) change from one of ``kinds`` to the other: a schema-free field
    takes values of any kind, and float64 reads the text ``merkle scan`` writes for NaN
    and infinities among numbers."""
    how = f" ({make_free(name)})" if make_free is not None else ""
    free = f"make {name!r} a schema-free field of the table{how}, which keeps each value as it is"
    if inside or kinds != {"number", "string"}:
        return f"; its values differ in kind: {free}"
    return (
        f'; for numbers written with "NaN" or "Infinity" pass --column-types {name}:float64; '
        f"for values of different kinds, {free}"
    )


def bad_value(source: Source, exc: BadValueError, read: int) -> str:
    """The one line of a value that does not convert to its field's type."""
    head = f"cannot read {source.name} as {source.fmt}: "
    row = "" if exc.row is None else f"row {read + exc.row + 1}, "
    field = f"field {exc.field!r}, " if exc.field else ""
    key = "" if exc.key is None else f"key {_shown(exc.key)}, "
    place = (row + field + key).removesuffix(", ")
    return head + f"{place}: value {_shown(exc.value)} {exc.reason}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def short(exc: BaseException) -> str:
    """An Arrow error on one printable line, without the bytes it quotes."""
    text = " ".join(str(exc).split())
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text if len(text) <= 200 else text[:197] + "..."


def _rereadable(source: Source) -> bool:
    """Whether ``source`` can be read again to find a row: a plain CSV file (stdin cannot
    be, and a compressed file that failed would most likely fail the same way again)."""
    return source.fmt == "csv" and source.path != "-" and not source.compressed


def _locate_csv_row(source: Source, options: ReadOptions) -> str | None:
    """The first row of a CSV file with the wrong number of cells, in pyarrow's words
    (``row 3: CSV parse error: expected 2 columns, got 3: 2,3,4``), or None."""
    if not _rereadable(source):
        return None
    found: list[Any] = []  # the first invalid row (pyarrow's InvalidRow)

    def note(row: Any) -> str:
        found.append(row)
        return "skip"

    parse = csv_parse_options(options, source.path)
    parse.invalid_row_handler = note
    opened = Input(source.path)
    try:
        reader = pacsv.open_csv(
            opened.stream,
            read_options=pacsv.ReadOptions(use_threads=False),
            parse_options=parse,
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(options.reader_types(), pa.binary())
            ),
        )
        try:
            for _ in reader:
                if found:
                    break
        finally:
            reader.close()
    except (pa.ArrowException, OSError, ValueError):
        pass
    finally:
        opened.close()
    if not found or found[0].number is None:
        return None
    row = found[0]
    return (  # the header is pyarrow's row 1
        f"row {row.number - 1}: CSV parse error: expected {row.expected_columns} columns, "
        f"got {row.actual_columns}: {row.text}"
    )


def locate_csv_error(
    source: Source, options: ReadOptions, expected: Mapping[str, pa.DataType]
) -> str | None:
    """Where a CSV value fails to convert: ``row N, column C: 'V' is not T: write ...``
    (or None).

    The file is read again with every column as bytes and each value
    converted to the type the reader chose for its column; the first value
    that fails (text that is not UTF-8 included) is named.
    """
    if not _rereadable(source):
        return None
    as_bytes = ReadOptions(
        options.key_fields, {}, {n: pa.binary() for n in expected}, options.delimiter, ()
    )
    opened = Input(source.path)
    nulls = pa.array([v.encode() for v in options.null_values], pa.binary())
    row = 0
    try:
        reader = csv_reader(opened.stream, as_bytes, as_bytes.column_types, source.path)
        try:
            for batch in reader:
                for name, target in expected.items():
                    if name not in batch.schema.names:
                        continue
                    column = batch.column(name)
                    column = pc.if_else(pc.is_in(column, value_set=nulls), None, column)
                    for i, value in enumerate(column.to_pylist()):
                        problem = None if value is None else _unconvertible(value, target, name)
                        if problem is not None:
                            return f"row {row + i + 1}, field {name!r}: {problem}"
                row += batch.num_rows
        finally:
            reader.close()
    except (pa.ArrowException, OSError, ValueError):
        return None
    finally:
        opened.close()
    return None


def _unconvertible(value: bytes, target: pa.DataType, name: str) -> str | None:
    """Why the CSV cell ``value`` of column ``name`` is not a ``target`` (None when it is)."""
    if is_binary(target):
        return None
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (
            f"byte 0x{value[exc.start]:02x} at offset {exc.start} of {value!r} is not UTF-8: "
            "re-encode the file as UTF-8 (a Latin-1 file: iconv -f latin1 -t utf-8), or "
            f"pass --column-types {name}:binary to store the cells' bytes as they are"
        )
    try:
        pa.array([text]).cast(target)
    except (pa.ArrowException, ValueError):
        return f"value {text!r} is not {target}: write {example(target)}"
    return None


#: How far past the rows read a JSON Lines file is searched for the value pyarrow
#: refused: the block that failed begins there, and pyarrow reads ahead a few blocks.
_JSON_SEARCH = 16 * BLOCK_SIZE


def locate_json_error(source: Source, options: ReadOptions, read: int) -> str | None:
    """Where a JSON Lines value fails to convert to the type its field is read as (the
    table's, or --column-types): ``row N, field 'F', key K: value V is not T: write ...``;
    ``row N: <pyarrow's reason>`` for a row none of its fields alone is refused in (not
    JSON, say); None if no row is refused.

    pyarrow's JSON reader names neither (``Failed to convert JSON to int64, couldn't
    parse:1.5``, or ``changed from number to boolean`` for ``true`` in an int64 field).
    The rows after the ``read`` ones are read again by pyarrow with the same types, a
    block at a time; a block it refuses is halved until one row is left (a read per
    halving, never a check per value), and that row's typed fields are read one by one.
    """
    types = {
        name: kind
        for name, kind in {**options.column_types, **options.key_types}.items()
        if name not in options.rendered  # read as text, and converted with their own errors
    }
    if source.fmt != "jsonl" or source.path == "-" or not types:
        return None
    schema = pa.schema(list(types.items()))
    block: list[bytes] = []
    size = searched = last = 0
    try:
        for row, line in json_rows(source.path):
            if row <= read:
                continue
            last = row
            block.append(line)
            size += len(line)
            if size >= BLOCK_SIZE:  # a block's rows at a time
                found = _refused_row(block, row, schema, types, options)
                searched += size
                if found is not None or searched > _JSON_SEARCH:
                    return found
                block, size = [], 0
        return _refused_row(block, last, schema, types, options) if block else None
    except (pa.ArrowException, OSError, ValueError):
        return None


def _refused_row(
    block: list[bytes],
    last: int,
    schema: pa.Schema,
    types: Mapping[str, pa.DataType],
    options: ReadOptions,
) -> str | None:
    """:func:`locate_json_error`'s message for the first refused row of ``block`` (the
    rows up to row ``last``), or None when pyarrow reads them all."""
    at = first_refused(block, schema)
    return None if at is None else _json_row(block[at], last - len(block) + at + 1, types, options)


def _refused(lines: Sequence[bytes], types: Mapping[str, pa.DataType]) -> str | None:
    """pyarrow's reason for refusing the JSON Lines ``lines`` read with these types, or
    None when it reads them (fields not in ``types`` are ignored)."""
    exc = refusal(lines, pa.schema(list(types.items())))
    return None if exc is None else _IN_ROW.sub("", short(exc))


def _json_row(line: bytes, row: int, types: Mapping[str, pa.DataType], options: ReadOptions) -> str:
    """What is wrong with the JSON Lines ``line`` (row ``row``): the field, key and
    value refused, or pyarrow's reason when no one field is."""
    try:
        record = json_line(line)
    except ValueError:
        record = None
    if isinstance(record, dict):
        for name, kind in types.items():
            if name in record and _refused([line], {name: kind}) is not None:
                key = [record.get(field) for field in options.key_fields]
                shown = "" if all(v is None for v in key) else f", key {_shown(_one(key))}"
                return (
                    f"row {row}, field {name!r}{shown}: value {_shown(record[name])} is not "
                    f"{kind}: write {_how(kind)}"
                )
    return f"row {row}: {_refused([line], types)}"


def _one(key: list[Any]) -> Any:
    return key[0] if len(key) == 1 else tuple(key)


def _how(kind: pa.DataType) -> str:
    """How a value of ``kind`` is written; for an integer type, with its range."""
    if pa.types.is_integer(kind):
        bits = kind.bit_width
        low, high = (
            (0, 2**bits - 1)
            if pa.types.is_unsigned_integer(kind)
            else (
                -(2 ** (bits - 1)),
                2 ** (bits - 1) - 1,
            )
        )
        return f"a whole number from {low} to {high}"
    return example(kind)
