"""Types pyarrow inferred for a text file that would store its values wrongly.

pyarrow's CSV and JSON readers choose a column's type from the first block
of a file. Two of their choices lose data without a word, so ``merkle load``
refuses them (before anything is written) unless the user asked for the type:

- **binary**: a CSV column holding bytes that are not UTF-8 (a Latin-1 file)
  is read as ``binary``, and every value of it would be stored as bytes, the
  valid text too. The error names the column and the first row and byte that
  is not UTF-8, and says to re-encode the file or to declare the column binary.
- **float64 for integers**: one integer beyond int64 (>= 2**63) makes the
  whole column float64, so 12345678901234567 becomes 1.2345678901234568e16
  and two distinct keys can collapse into one. The error names the column and
  suggests an exact type (``decimal128(38,0)`` or ``string``).

A type inferred from the first block can also meet a value it does not hold
in a later block (a ``2.5`` in a column of integers, a member a nested
object did not have): the streaming reader then fails, and whether a file
loads would depend on its size. :func:`explain_later` makes that error name
the row, the field and the ``--column-types`` that reads the column whole.

The integer check is exact rather than a rule on magnitudes: a float64
column is suspect only when every value of the first batch is integral (a
cheap vectorized test; a column with a 2.5 in it is plainly float data), and
only then is the text of that batch's rows read again, for those columns
only, to see whether every value was written as an integer literal (``7``,
not ``7.0`` or ``7e0``). Values written as floats are float data whatever
their size, and a column of integer literals is integer data whatever their
size, so neither a large ``1e19`` nor a small ``3`` is misjudged. The extra
read costs one block of one file, and only when a column is suspect.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from merkle.cli.common import CliError
from merkle.cli.content import BOM
from merkle.cli.jsonrefusal import first_refused, json_rows
from merkle.cli.rendered import is_binary
from merkle.cli.sources import (
    BLOCK_SIZE,
    ReadOptions,
    Source,
    csv_parse_options,
    head_bytes,
)

__all__ = ["check_inferred", "explain_later", "not_utf8"]

#: An integer literal as the CSV reader accepts one (surrounding blanks allowed).
_INTEGER = re.compile(r"\s*[+-]?\d+\s*")
#: The range of int64, the widest integer type the readers infer.
_INT64 = (-(2**63), 2**63 - 1)


def check_inferred(
    batch: pa.RecordBatch,
    source: Source,
    options: ReadOptions,
    binary_ok: Sequence[str],
    first_row: int,
) -> None:
    """CliError when the first batch of a CSV or JSON Lines file has a column of a type
    the user did not ask for and that would store its values wrongly (see the module doc).

    ``binary_ok`` are the columns that may be binary (declared so by the table or the
    options); the columns read with a given type (``options``) are never checked.
    """
    if source.fmt not in ("csv", "jsonl"):
        return  # a Parquet file's types are its own, not inferred
    given = {**options.column_types, **options.key_types, **options.rendered}
    suspects = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if name in given:
            continue
        kind = column.type
        if is_binary(kind) and name not in binary_ok:
            raise CliError(_binary_message(source, name, column, first_row))
        if pa.types.is_floating(kind) and _all_integral(column):
            suspects.append(name)
    if suspects:
        _check_integer_text(source, options, suspects, batch.num_rows)


def not_utf8(value: bytes) -> str | None:
    """Where ``value`` stops being UTF-8 (``byte 0xe9 at offset 3 of b'Jos\\xe9'``), or
    None when it is UTF-8."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        shown = repr(value if len(value) <= 40 else value[:37] + b"...")
        return f"byte 0x{value[exc.start]:02x} at offset {exc.start} of {shown}"
    return None


def _binary_message(source: Source, name: str, column: pa.Array, first_row: int) -> str:
    where = ""
    for i, value in enumerate(column.to_pylist()):
        problem = not_utf8(value) if isinstance(value, bytes) else None
        if problem is not None:
            where = f" (row {first_row + i}: {problem})"
            break
    return (
        f"cannot read {source.name} as {source.fmt}: column {name!r} is not UTF-8 text{where}; "
        "re-encode the file as UTF-8 (a Latin-1 file: iconv -f latin1 -t utf-8), or pass "
        f"--column-types {name}:binary to store the column's bytes as they are"
    )


def _all_integral(column: pa.Array) -> bool:
    """Every non-null value is a whole number (NaN is not): the text may be integers."""
    if column.null_count == len(column):
        return False
    whole = pc.equal(pc.floor(column), column)
    return bool(pc.all(whole).as_py())


def _check_integer_text(source: Source, options: ReadOptions, names: list[str], rows: int) -> None:
    """CliError naming the first of ``names`` whose text in the first ``rows`` rows is
    integer literals only."""
    try:
        texts = _first_texts(source, options, names, rows)
    except (pa.ArrowException, OSError, ValueError):
        return  # the text cannot be read again (a quoted line break cut by the head): no proof
    for name in names:
        values = [v for v in texts.get(name, []) if v is not None]
        if not values or not all(_INTEGER.fullmatch(v) for v in values):
            continue
        big = next((v.strip() for v in values if not _INT64[0] <= int(v) <= _INT64[1]), None)
        example = f" (such as {big})" if big else ""
        raise CliError(
            f"cannot read {source.name} as {source.fmt}: column {name!r} holds integers beyond "
            f"int64{example}, which would be stored as float64 and lose precision; pass "
            f"--column-types {name}:decimal128(38,0) (or {name}:string) to keep them exact, "
            f"or {name}:float64 to accept the rounding"
        )


def _first_texts(
    source: Source, options: ReadOptions, names: list[str], rows: int
) -> dict[str, list[str | None]]:
    """The text of ``names`` in the first ``rows`` rows of the file (None: no value)."""
    head = head_bytes(source)
    if source.fmt == "csv":
        return _csv_texts(head, source, options, names, rows)
    out: dict[str, list[str | None]] = {name: [] for name in names}
    for record in _json_records(head, rows):
        for name in names:
            value = record.get(name)
            out[name].append(None if value is None else value.text)
    return out


def _csv_texts(
    head: bytes, source: Source, options: ReadOptions, names: list[str], rows: int
) -> dict[str, list[str | None]]:
    convert = pacsv.ConvertOptions(
        include_columns=names,
        column_types={name: pa.string() for name in names},
        null_values=list(options.null_values),
        strings_can_be_null=True,
    )
    reader = pacsv.open_csv(
        pa.BufferReader(head),
        read_options=pacsv.ReadOptions(block_size=BLOCK_SIZE, use_threads=False),
        parse_options=csv_parse_options(options, source.path),
        convert_options=convert,
    )
    out: dict[str, list[str | None]] = {name: [] for name in names}
    try:
        got = 0
        for batch in reader:
            for name in names:
                out[name].extend(batch.column(name).to_pylist())
            got += batch.num_rows
            if got >= rows:
                break
    finally:
        reader.close()
    return {name: values[:rows] for name, values in out.items()}


class _Literal:
    """A JSON number as it is written (``7``, ``7.0``, ``7e0``)."""

    def __init__(self, text: str) -> None:
        self.text = text


def _json_records(head: bytes, rows: int) -> Iterator[dict[str, Any]]:
    """The first ``rows`` objects of JSON Lines text, numbers kept as their literals."""
    got = 0
    for line in head.split(b"\n"):
        if got >= rows:
            return
        if not line.strip():
            continue
        try:
            record = json.loads(
                line,
                parse_int=_Literal,
                parse_float=_Literal,
            )
        except ValueError:
            return  # a line cut by the end of the head, or one the reader refused
        got += 1
        if isinstance(record, dict):
            yield {k: v for k, v in record.items() if isinstance(v, _Literal)}


# -- a later block that does not fit the first one's types ------------------------------

#: How a message of ``merkle.cli.readerrors`` names a field, and a CSV value.
_FIELD = re.compile(r"field '([^']+)'")
_VALUE = re.compile(r"value '(.*)' is not ")


def explain_later(
    message: str, source: Source, options: ReadOptions, schema: pa.Schema | None, read: int
) -> str:
    """``message`` (why ``source`` could not be read after ``read`` rows, in batches of
    ``schema``) with the row, the field and the fix, when a type pyarrow inferred from
    the first block of the file does not hold a value of a later block."""
    if source.fmt == "jsonl" and _TOO_BIG in message:
        return _explain_too_big(message, source, options)
    if schema is None:
        return message  # the first block: its types were inferred from all of it
    given = {**options.column_types, **options.key_types, **options.rendered}
    inferred = [name for name in schema.names if name not in given]
    if source.fmt == "csv":
        named = _FIELD.search(message)
        if named is None or named.group(1) not in inferred:
            return message
        name = named.group(1)
        kind = schema.field(name).type
        value = _VALUE.search(message)
        wider = "float64" if value and _is_number(value.group(1), kind) else "string"
        return message + (
            f"; column {name!r} is read as {kind}, the type inferred from the file's first "
            f"{BLOCK_SIZE >> 20} MiB: pass --column-types {name}:{wider} to read it whole as "
            f"{wider}"
        )
    if source.fmt != "jsonl" or options.rendered or options.free or source.path == "-":
        return message  # stdin cannot be read again; typedjson names its own rows
    if "(after row " not in message:
        return message  # pyarrow named the row (and readerrors the field)
    try:
        found = _first_misfit_line(source, schema, read)
    except (pa.ArrowException, OSError, ValueError):
        return message
    if found is None:
        return message
    row, line = found
    return f"cannot read {source.name} as {source.fmt}: row {row}: " + _line_misfit(
        line, schema, inferred
    )


#: pyarrow's words for a JSON number beyond float64 (1e400) in a column it infers.
_TOO_BIG = "Number too big to be stored in double"
#: How a message of ``merkle.cli.readerrors`` names the row.
_ROW = re.compile(r": row (\d+): ")


def _explain_too_big(message: str, source: Source, options: ReadOptions) -> str:
    """``message`` (pyarrow refused a JSON number beyond float64) as the float32 and
    typed fields' refusals say it: row, field, key, value and what keeps the value."""
    row = _ROW.search(message)
    if row is None:
        return message
    line = _json_line(source, int(row.group(1)))
    try:
        record = json.loads(line, parse_float=_Literal) if line is not None else None
    except ValueError:
        return message
    found = _too_big_member(record, "") if isinstance(record, dict) else None
    if found is None or not isinstance(record, dict):
        return message
    path, text = found
    key = [_shown(record.get(name)) for name in options.key_fields]
    shown = f", key {key[0]}" if len(key) == 1 else f", key ({', '.join(key)})" if key else ""
    top = path.split(".")[0]
    return (
        f"cannot read {source.name} as {source.fmt}: row {row.group(1)}, field {path!r}"
        f"{shown}: value {text} is beyond the range of float64 (it would be stored as "
        f"Infinity): write a number float64 holds, or keep it exact as a decimal or as "
        f"text (--column-types {top}:decimal256(76,0) or {top}:string, for a new table)"
    )


def _shown(value: Any) -> str:
    """A decoded JSON value as messages show one (a number as it is written)."""
    return value.text if isinstance(value, _Literal) else repr(value)


def _json_line(source: Source, row: int) -> bytes | None:
    """The text of the ``row``-th (1-based) non-blank line of JSON Lines ``source``
    (stdin: only within its first blocks, which are kept)."""
    try:
        if source.path == "-":
            lines = [line for line in head_bytes(source).split(b"\n") if line.strip()]
            return lines[row - 1].removeprefix(BOM) if row <= len(lines) else None
        for at, line in json_rows(source.path):
            if at == row:
                return line
    except (pa.ArrowException, OSError):
        return None
    return None


def _too_big_member(value: Any, path: str) -> tuple[str, str] | None:
    """The dotted path and literal of the first number in a decoded JSON ``value`` (its
    floats kept as :class:`_Literal`) beyond float64, or None."""
    if isinstance(value, _Literal):
        return (path, value.text) if math.isinf(float(value.text)) else None
    if isinstance(value, dict):
        members = [(f"{path}.{name}" if path else str(name), item) for name, item in value.items()]
    elif isinstance(value, list):
        members = [(path, item) for item in value]  # a list's items are its field's values
    else:
        return None
    for inner, item in members:
        found = _too_big_member(item, inner)
        if found is not None:
            return found
    return None


def _is_number(text: str, kind: pa.DataType) -> bool:
    """Whether ``text``, refused by an integer column, is a number (2.5, 1e3, NaN)."""
    if not pa.types.is_integer(kind):
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _first_misfit_line(source: Source, schema: pa.Schema, read: int) -> tuple[int, bytes] | None:
    """The row number and text of the first JSON line after row ``read`` that ``schema``
    does not read (None: none in the next two blocks), found by halving the lines: a
    few reads by pyarrow, not one per line."""
    lines: list[bytes] = []
    size = 0
    for row, line in json_rows(source.path):
        if row > read:
            lines.append(line)
            size += len(line)
            if size >= 2 * BLOCK_SIZE:
                break
    at = first_refused(lines, schema, unexpected="error")
    return None if at is None else (read + at + 1, lines[at])


def _line_misfit(line: bytes, schema: pa.Schema, inferred: list[str]) -> str:
    """Which field of the JSON ``line`` the columns' types (``schema``) do not hold, and
    the --column-types that reads it."""
    try:
        own = pajson.read_json(pa.BufferReader(line)).schema
    except pa.ArrowInvalid as exc:
        return " ".join(str(exc).split())
    for field in own:
        if field.name in schema.names and schema.field(field.name).type == field.type:
            continue
        if field.name in schema.names:
            have = schema.field(field.name).type
            path = _differs_at(have, field.type, field.name)
            what = f"field {path!r} does not fit column {field.name!r}, read as {have}"
        else:
            have, path = None, field.name
            what = f"field {path!r} is not in the file's first rows"
        if have is not None and field.name not in inferred:
            return what + ": fix the value"
        try:
            merged = (
                pa.unify_schemas(
                    [pa.schema([(field.name, have)]), pa.schema([field])],
                    promote_options="permissive",
                )
                .field(field.name)
                .type
                if have is not None
                else field.type
            )
        except (pa.ArrowException, TypeError):
            return what + f" ({field.type} here): give its values one type in the file"
        return what + (
            f" (the types of a file's columns are inferred from its first {BLOCK_SIZE >> 20} "
            f"MiB): pass --column-types '{field.name}:{merged}' to read it whole"
        )
    return "its values do not fit the types of the first rows"


def _differs_at(have: pa.DataType, got: pa.DataType, path: str) -> str:
    """The dotted path inside ``path`` where the types ``have`` and ``got`` first differ."""
    if pa.types.is_struct(have) and pa.types.is_struct(got):
        for member in got:
            index = have.get_field_index(member.name)
            if index < 0:
                return f"{path}.{member.name}"
            if have.field(index).type != member.type:
                return _differs_at(have.field(index).type, member.type, f"{path}.{member.name}")
    return path
