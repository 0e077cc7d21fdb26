"""Streaming reads of a table: Arrow record batches in key order, and DataFrames.

:func:`batch_reader` is what ``Database.to_batches`` returns: a
``pyarrow.RecordBatchReader`` that reads one tablet at a time (a few ahead,
through the table store's byte-bounded segment cache), so a table far bigger
than memory streams in bounded memory. ``to_pandas`` and ``to_polars`` are
``to_arrow`` converted by pyarrow and Polars (optional extras
``merkle-db[pandas]``, ``merkle-db[polars]``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from merkle.errors import UsageError
from merkle.lazy import compute as pc
from merkle.tablets.freeform import check_zones
from merkle.tablets.table import Table

__all__ = ["batch_reader", "check_filter", "to_pandas", "to_polars"]


def check_filter(predicate: Any) -> pc.Expression | None:
    """A row filter: a ``pyarrow.compute.Expression`` (``pc.field("qty") > 3``) or None."""
    if predicate is None or isinstance(predicate, pc.Expression):
        return predicate
    raise UsageError(
        f"filter must be a pyarrow.compute.Expression such as pc.field('qty') > 3, "
        f"got {type(predicate).__name__}"
    )


def batch_reader(
    table: Table,
    fields: Sequence[str] | None,
    from_pk: Any,
    to_pk: Any,
    predicate: pc.Expression | None,
) -> pa.RecordBatchReader:
    """The rows of ``table`` (a key range, a projection, filtered) as a stream, in key order."""
    if not table.root.typed:
        # A table from before schemas has no one schema its tablets share: read it whole.
        whole = table.to_arrow(
            fields=None if predicate is not None else fields, from_pk=from_pk, to_pk=to_pk
        )
        if predicate is not None:
            whole = _filter(whole, predicate)
            if fields is not None:
                whole = whole.select(
                    [n for n in whole.column_names if n in {*fields, *table.key.fields}]
                )
        return pa.RecordBatchReader.from_batches(whole.schema, whole.to_batches())
    read = None if predicate is not None else fields
    schema = table.empty(fields).schema

    def batches() -> Iterator[pa.RecordBatch]:
        for raw in table.scan(fields=read, from_pk=from_pk, to_pk=to_pk):
            rows = table.present(raw, read)
            if predicate is not None:
                rows = _filter(rows, predicate).select(schema.names)
            if rows.num_rows:
                yield from rows.to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches())


def _filter(rows: pa.Table, predicate: pc.Expression) -> pa.Table:
    """The rows ``predicate`` keeps; UsageError when it cannot be evaluated on them (a
    field the table does not hold, a comparison of mismatched types, a non-boolean)."""
    try:
        return rows.filter(predicate)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise UsageError(
            f"filter {predicate} cannot be evaluated on the table's rows: {exc}"
        ) from None


def to_pandas(arrow: pa.Table) -> Any:
    """A pandas DataFrame of an Arrow table (needs ``merkle-db[pandas]``).

    pyarrow's default turns an integer column holding nulls into float64, which
    rounds values past 2**53; such columns become pandas' nullable integer types
    (``Int64``, ``UInt8``, ...) instead, so the values come back exact. Integer
    columns without nulls stay numpy integers, as pyarrow gives them. Integers
    inside a list or struct that holds nulls come back as Python ints beside
    None (``integer_object_nulls``), not as floats: a DataFrame written back
    then stores the values it was given.
    """
    try:
        import pandas
    except ImportError:
        raise UsageError("to_pandas needs pandas: pip install 'merkle-db[pandas]'") from None
    for field in arrow.schema:  # pandas needs each zone: a raw pytz error otherwise
        check_zones(field.type, field.name)
    nullable = [
        i
        for i, field in enumerate(arrow.schema)
        if pa.types.is_integer(field.type) and arrow.column(i).null_count
    ]
    if not nullable:
        return arrow.to_pandas(integer_object_nulls=True)
    rest = arrow.drop_columns([arrow.column_names[i] for i in nullable])
    frame = rest.to_pandas(integer_object_nulls=True)
    for i in nullable:
        column = arrow.column(i)
        arrow_name = str(column.type)  # int8 ... uint64: pandas' Int8 ... UInt64
        dtype = pandas.api.types.pandas_dtype(arrow_name.replace("int", "Int").replace("uI", "UI"))
        values = column.to_pandas(types_mapper={column.type: dtype}.get)
        frame.insert(i, arrow.column_names[i], values)
    return frame


def to_polars(arrow: pa.Table) -> Any:
    """A Polars DataFrame of an Arrow table (needs ``merkle-db[polars]``).

    Polars has no 256-bit decimals (it panics on them, a ``BaseException``): a
    ``decimal256`` of at most 38 digits is read as the ``decimal128`` of the same
    precision and scale (every value fits, none changes); a wider one is a
    UsageError naming the field.
    """
    try:
        import polars
    except ImportError:
        raise UsageError("to_polars needs polars: pip install 'merkle-db[polars]'") from None
    fields = [field.with_type(_polars_type(field.type, field.name)) for field in arrow.schema]
    if any(a.type != b.type for a, b in zip(fields, arrow.schema, strict=True)):
        arrow = arrow.cast(pa.schema(fields, metadata=arrow.schema.metadata))
    try:
        return polars.from_arrow(arrow)
    except BaseException as exc:  # a Rust panic is a BaseException: make it an error
        if type(exc).__name__ != "PanicException":
            raise
        raise UsageError(
            f"Polars cannot read this data ({exc}): read it with to_arrow or to_pandas"
        ) from None


#: The widest decimal Polars holds, in digits.
_POLARS_DIGITS = 38


def _polars_type(kind: pa.DataType, name: str) -> pa.DataType:
    """``kind`` with each ``decimal256`` (also inside lists, structs and maps) as the
    ``decimal128`` Polars reads; an equal type when there is none."""
    if pa.types.is_decimal256(kind):
        if kind.precision > _POLARS_DIGITS:
            raise UsageError(
                f"field {name!r} is a {kind}: Polars holds decimals of at most "
                f"{_POLARS_DIGITS} digits; read it with to_arrow or to_pandas, or leave it "
                "out of to_polars (fields=[...])"
            )
        return pa.decimal128(kind.precision, kind.scale)
    if pa.types.is_map(kind):
        key = _polars_type(kind.key_type, name)
        item = _polars_type(kind.item_type, name)
        if key == kind.key_type and item == kind.item_type:
            return kind
        return pa.map_(kind.key_field.with_type(key), kind.item_field.with_type(item))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        value = _polars_type(kind.value_type, name)
        if value == kind.value_type:
            return kind
        make = pa.list_ if pa.types.is_list(kind) else pa.large_list
        return make(kind.value_field.with_type(value))
    if pa.types.is_fixed_size_list(kind):
        value = _polars_type(kind.value_type, name)
        if value == kind.value_type:
            return kind
        return pa.list_(kind.value_field.with_type(value), kind.list_size)
    if pa.types.is_struct(kind):
        children = [kind.field(i) for i in range(kind.num_fields)]
        types = [_polars_type(child.type, name) for child in children]
        if all(t == child.type for t, child in zip(types, children, strict=True)):
            return kind
        return pa.struct([c.with_type(t) for c, t in zip(children, types, strict=True)])
    return kind
