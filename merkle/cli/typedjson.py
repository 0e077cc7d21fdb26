"""JSON Lines read into a table whose fields say how to read the text ``merkle scan`` wrote.

pyarrow's JSON reader parses none of the text the output writes for values
JSON has no type for (hex bytes, ISO-8601 dates and times, durations), and
refuses a float column that holds both numbers and ``"NaN"``. So when the
table has such fields (``merkle.cli.rendered``), its files are read here, in
blocks of whole lines:

- first by pyarrow, with those fields read as text (floats as numbers) and
  then converted by the field's type (pyarrow's cast, else value by value);
- a block pyarrow cannot read that way (a ``"NaN"`` among numbers, a number
  where text was expected) or that holds a field nested with such values is
  decoded line by line (``json.loads``) and its typed fields converted value
  by value; the other fields are still read by pyarrow, so they get the types
  its inference gives.

The fields the table does not type keep the types pyarrow chose in the first
block, as its streaming reader keeps them.

The table's schema-free fields have no type: a value there may be of any kind
(``[1, "a"]``, an object whose members differ from line to line, a number
beyond int64), which pyarrow's inference cannot read or would change (a
member absent from one object made null, ``2**70`` made a float). A file
that holds them is decoded line by line, and their values are stored as the
JSON holds them (CBOR, as ``Database.write`` stores a schema-free value):
``merkle scan -f jsonl`` output loads back as the records it came from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.json as pajson

from merkle.cli.rendered import (
    BadValueError,
    beyond_range,
    from_rendered,
    typed_array,
    typed_column,
)
from merkle.tablets.cbor import cbor_array, cbor_field

__all__ = ["json_line", "read_typed_json"]


class _Overflowed(float):
    """A JSON number beyond float64 (``1e400``): Infinity, as ``json`` decodes it, that
    keeps the text it was written as; its ``repr`` is that text, so that the message
    refusing it quotes what the file holds, not ``inf``."""

    text: str

    def __new__(cls, text: str) -> _Overflowed:
        number = super().__new__(cls, text)
        number.text = text
        return number

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__


def _number(text: str) -> float:
    """A JSON number with a fraction or exponent: a float, or :class:`_Overflowed`."""
    number = float(text)
    return _Overflowed(text) if math.isinf(number) else number


def json_line(line: bytes | str) -> Any:
    """One JSON Lines line decoded (JSONDecodeError if it is not JSON), a number beyond
    float64 kept with its literal (:class:`_Overflowed`) for the messages."""
    return json.loads(line, parse_float=_number)


def _fast_type(kind: pa.DataType) -> pa.DataType | None:
    """How pyarrow reads a typed field in the first try (None: only line by line)."""
    if pa.types.is_nested(kind) or pa.types.is_dictionary(kind):
        return None
    if pa.types.is_floating(kind):
        return pa.float64()
    return pa.string()


def read_typed_json(
    stream: Any,
    block_size: int,
    plain: Mapping[str, pa.DataType],
    typed: Mapping[str, pa.DataType],
    key_fields: Sequence[str],
    free: Sequence[str] = (),
) -> Iterator[pa.RecordBatch]:
    """The record batches of the JSON Lines ``stream``: ``plain`` fields read by pyarrow as
    these types, ``typed`` ones converted from their rendering (BadValueError if one does not
    convert; its row counts from 0 in the batch), ``free`` (schema-free) ones as the JSON
    values the lines hold, in CBOR columns."""
    fast = {name: _fast_type(kind) for name, kind in typed.items()}
    line_by_line = bool(free) or any(kind is None for kind in fast.values())
    learned: dict[str, pa.DataType] = {}
    order: list[str] = []
    carry = b""
    while True:
        data = stream.read(block_size)
        block = carry + data
        if data:
            end = block.rfind(b"\n") + 1
            block, carry = block[:end], block[end:]
        if block.strip():
            batch = None
            if not line_by_line:
                batch = _by_pyarrow(block, {**learned, **plain}, fast, typed)
            if batch is None:
                batch = _line_by_line(block, {**learned, **plain}, typed, key_fields, free)
            if not learned:
                known = {**plain, **typed, **dict.fromkeys(free)}
                learned = {f.name: f.type for f in batch.schema if f.name not in known}
            # The columns in one order in every batch (the first block's, then new ones).
            order += [name for name in batch.schema.names if name not in order]
            yield batch.select([name for name in order if name in batch.schema.names])
        if not data:
            return


def _read(block: bytes, types: Mapping[str, pa.DataType]) -> pa.RecordBatch:
    """pyarrow's reading of ``block`` (the fields in ``types`` as those, the rest inferred)."""
    schema = pa.schema(list(types.items())) if types else None
    table = pajson.read_json(
        pa.BufferReader(block),
        read_options=pajson.ReadOptions(use_threads=False, block_size=len(block) + 1),
        parse_options=pajson.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="infer"
        ),
    )
    return table.combine_chunks().to_batches()[0] if table.num_rows else _empty(table.schema)


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=schema)


def _by_pyarrow(
    block: bytes,
    plain: Mapping[str, pa.DataType],
    fast: Mapping[str, pa.DataType | None],
    typed: Mapping[str, pa.DataType],
) -> pa.RecordBatch | None:
    """``block`` read by pyarrow, the typed fields as text then converted (None when
    pyarrow cannot read them so, or a value does not convert: the block is then read
    line by line)."""
    try:
        batch = _read(block, {**plain, **{n: k for n, k in fast.items() if k is not None}})
    except pa.ArrowException:
        return None
    arrays = []
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if name in typed:
            try:
                column = typed_column(column, typed[name], cells=False)
            except BadValueError:
                return None  # read line by line, which names the record's key
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _line_by_line(
    block: bytes,
    plain: Mapping[str, pa.DataType],
    typed: Mapping[str, pa.DataType],
    key_fields: Sequence[str],
    free: Sequence[str] = (),
) -> pa.RecordBatch:
    """``block`` decoded one line at a time: the typed fields converted by their types,
    the schema-free ones (``free``) kept as decoded, the others read by pyarrow."""
    records: list[dict[str, Any]] = []
    for line in block.split(b"\n"):
        if not line.strip():
            continue
        shown = line.decode("utf-8", "replace")
        try:
            record = json_line(line)
        except json.JSONDecodeError as exc:
            problem = f"is not JSON ({exc.msg} at character {exc.pos + 1})"
            raise BadValueError(problem, shown, len(records)) from None
        if not isinstance(record, dict):
            raise BadValueError("is not a JSON object", shown, len(records))
        records.append(record)
    names = list(dict.fromkeys(name for record in records for name in record))
    rest = [name for name in names if name not in typed and name not in free]
    kept = [name for name in names if name in free]
    _refuse_overflowed(records, rest + kept, key_fields)
    columns: dict[str, pa.Array] = {}
    fields: dict[str, pa.Field] = {}
    if rest:
        text = "\n".join(json.dumps({n: r[n] for n in rest if n in r}) for r in records)
        others = _read(text.encode(), {n: plain[n] for n in rest if n in plain})
        columns = {name: others.column(name) for name in rest}
    for name in kept:  # stored as decoded: the form Database.write gives such a value
        values = [record.get(name) for record in records]
        columns[name] = cbor_array(name, values, lambda row: f"row {row + 1} of the block")
        fields[name] = cbor_field(name)
    for name in names:
        if name in typed:
            try:
                columns[name] = _typed(records, name, typed[name])
            except BadValueError as exc:
                if exc.row is not None:
                    key = [records[exc.row].get(field) for field in key_fields]
                    exc.key = key[0] if len(key) == 1 else tuple(key)
                raise
    schema = pa.schema([fields.get(name) or pa.field(name, columns[name].type) for name in names])
    return pa.RecordBatch.from_arrays([columns[name] for name in names], schema=schema)


def _refuse_overflowed(
    records: list[dict[str, Any]], names: Sequence[str], key_fields: Sequence[str]
) -> None:
    """BadValueError for the first number beyond float64 in the fields ``names`` of
    ``records``, which pyarrow reads from the text here (``json.dumps`` writes it as
    ``Infinity``) and would store as Infinity without a word: pyarrow's own reading of
    a file refuses it (``merkle.cli.sources``), and so does this one. The message
    names the member (``field 'a.b'``) and the number as written."""
    for row, record in enumerate(records):
        for name in names:
            found = _overflowed_member(record.get(name), name)
            if found is not None:
                exc = beyond_range(pa.float64(), found[1], row)
                exc.field = found[0]
                key = [record.get(field) for field in key_fields]
                exc.key = key[0] if len(key) == 1 else tuple(key)
                raise exc


def _overflowed_member(value: Any, path: str) -> tuple[str, _Overflowed] | None:
    """The dotted path and the first :class:`_Overflowed` number in a decoded JSON
    ``value`` (a list's items are its field's values), or None."""
    if isinstance(value, _Overflowed):
        return path, value
    items: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        items = [(f"{path}.{name}", item) for name, item in value.items()]
    elif isinstance(value, list):
        items = [(path, item) for item in value]
    for inner, item in items:
        found = _overflowed_member(item, inner)
        if found is not None:
            return found
    return None


def _typed(records: list[dict[str, Any]], name: str, kind: pa.DataType) -> pa.Array:
    values = []
    for row, record in enumerate(records):
        try:
            values.append(from_rendered(record.get(name), kind))
        except BadValueError as exc:
            exc.field, exc.row, exc.value = name, row, record.get(name)
            raise
    try:
        return typed_array(values, kind)
    except BadValueError as exc:
        exc.field = name
        if exc.row is not None:
            exc.value = records[exc.row].get(name)
        raise
