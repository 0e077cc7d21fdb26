"""pandas DataFrames given to ``Database.write``, as Arrow tables.

pyarrow converts a DataFrame (``pa.Table.from_pandas``), but what it cannot
convert it reports as raw ``ArrowInvalid``, ``ArrowTypeError``, ``ValueError``
or ``TypeError``. Here each becomes a :class:`~merkle.errors.UsageError`
naming the column and what to do, checked before the conversion where pandas
says enough (two columns of one name, a sparse or complex column) and column
by column after it fails (a column of mixed values).

A column that Arrow cannot type by itself, or types as another type, may still
fit the table's own field: ``to_pandas`` gives a map field as lists of ``(key,
value)`` tuples, which no inference reads as a map, a uuid inside a list as
its 16 bytes, which inference reads as binary, and a field of an extension type
as pandas holds its values (a ``json_`` as ``str``, read as string; a ``bool8``
as ``bool``; a tensor as numpy arrays, read as a list). Such a column is
converted to the field's type as records are
(:func:`~merkle.tablets.fitcolumn.typed_array`: a value the type would cut or
round is a SchemaError, never stored changed), so ``to_pandas`` then ``write``
stores what it read.

The index: a named index level is data and becomes a field (after the
columns); an unnamed one is dropped. A named level that has a column's name is
that column when their values are equal (``df.set_index("id", drop=False)``)
and is dropped; with other values it is a UsageError, not a second field
under an invented name.

The table returned holds none of the frame's memory: pyarrow wraps a numeric,
datetime, masked or categorical column's numpy array without copying it, and
the write keeps the table (in its value, for a replay, then in the committed
value), so those columns are copied once (:func:`_detached`); a caller changing
its frame afterwards changes no Database value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from merkle.errors import SchemaError, UsageError
from merkle.tablets.conform import KeyLayout
from merkle.tablets.fitcolumn import typed_array
from merkle.tablets.recordcolumn import record_column
from merkle.tablets.schema import is_free
from merkle.tablets.storedform import plain_type, storage_type

__all__ = ["pandas_table"]

#: What pyarrow raises for a column it cannot convert.
_ARROW_FAILURES = (pa.ArrowException, TypeError, ValueError, OverflowError)


def pandas_table(
    frame: Any,
    schema: pa.Schema | None = None,
    key: KeyLayout | None = None,
    table: str = "this table",
) -> pa.Table | None:
    """``frame`` as an Arrow table if it is a pandas DataFrame, else None.

    ``schema`` (the table's, when known) types a column no inference can read;
    ``key`` names the record of a value that does not fit; ``table`` names the
    table in errors.
    """
    if not type(frame).__module__.startswith("pandas"):
        return None
    import pandas

    if not isinstance(frame, pandas.DataFrame):
        return None
    _check_names(frame.columns, table)
    data, columns = _index_as_columns(frame, table)
    _check_kinds(data, columns, table)
    _check_keys_present(data, key, table)
    typed = _field_typed_columns(data, columns, schema)
    converted = None
    if not typed:
        with contextlib.suppress(*_ARROW_FAILURES):
            converted = pa.Table.from_pandas(data, columns=columns, preserve_index=False)
    if converted is None:
        converted = _by_column(data, columns, schema, key, table, typed)
    return _detached(converted, data, columns)


def _detached(converted: pa.Table, data: Any, columns: Sequence[Hashable]) -> pa.Table:
    """``converted`` holding none of the frame's memory: its columns that pyarrow may have
    built zero-copy over the frame's buffers copied, once.

    pyarrow converts a numeric, datetime, masked (``Int64``) or categorical column by
    wrapping the numpy array the frame holds, not copying it; the write keeps that
    table (in the value returned, then in the committed value's cache), so
    ``df.loc[0, "v"] = 999`` after ``write`` would change what a Database value --
    immutable -- reads, and what ``commit`` stores. A column of Python objects
    (``object``, ``string[python]``) is built in new buffers already and kept as it is.
    """
    manager = pa.default_cpu_memory_manager()
    arrays = []
    for name, column in zip(columns, converted.columns, strict=True):
        if _built_afresh(data[name].dtype):
            arrays.append(column)
        else:
            chunks = [chunk.copy_to(manager) for chunk in column.chunks]
            arrays.append(pa.chunked_array(chunks, type=column.type))
    return pa.Table.from_arrays(arrays, schema=converted.schema)


def _built_afresh(dtype: Any) -> bool:
    """Whether pyarrow converts a column of ``dtype`` into buffers of its own: a column
    of Python objects, which it reads one value at a time."""
    import pandas

    if isinstance(dtype, pandas.StringDtype):
        return bool(dtype.storage == "python")
    return isinstance(dtype, np.dtype) and dtype.kind == "O"


def _inferred_wrongly(kind: pa.DataType) -> bool:
    """Whether inference may type a ``to_pandas`` column of ``kind`` as another type: a
    map (lists of ``(key, value)`` tuples read as lists of lists where Arrow can type the
    entries), or an extension type at any depth (its values as pandas holds them: a
    ``json_`` as ``str`` read as string, a ``bool8`` as ``bool``, a tensor as numpy
    arrays read as a list, a nested uuid's 16 bytes read as binary)."""
    if pa.types.is_map(kind) or isinstance(kind, pa.BaseExtensionType):
        return True
    return any(_inferred_wrongly(kind.field(i).type) for i in range(kind.num_fields))


def _field_typed_columns(
    data: Any, columns: Sequence[Hashable], schema: pa.Schema | None
) -> set[str]:
    """The columns whose fields :func:`_inferred_wrongly` holds: they always take the
    field's type (as records do), never inference's. Only object columns, but for a
    field of an extension type, which pandas may hold in a column of any dtype (a
    ``bool8`` as ``bool``, an extension of ``int64`` storage as ``int64``)."""
    if schema is None:
        return set()
    typed = set()
    for name in columns:
        label = _label(name)
        if label not in schema.names:
            continue
        field = schema.field(label)
        if is_free(field) or not _inferred_wrongly(field.type):
            continue
        if data[name].dtype == object or isinstance(field.type, pa.BaseExtensionType):
            typed.add(label)
    return typed


def _as_inferred(series: Any, kind: pa.DataType) -> pa.Array | None:
    """``series`` as Arrow infers it, in ``kind`` (an extension type) when inference gives
    ``kind`` itself (a uuid column: ``UUID`` objects) or the type records of ``kind`` are
    built in (``str`` of a ``json_``, ``bool`` of a ``bool8``), which becomes ``kind``
    without a value changing; None otherwise (converted as records are, checked)."""
    try:
        array = pa.array(series, from_pandas=True)
    except _ARROW_FAILURES:
        return None
    stored = storage_type(kind)
    if array.type == stored:
        return array
    if array.type == plain_type(stored):
        return array.cast(stored)
    return None


def _label(name: Hashable) -> str:
    """A column's field name (pyarrow's: a name that is not a string is written as one)."""
    return name if isinstance(name, str) else str(name)


def _check_names(names: Sequence[Hashable], table: str) -> None:
    seen: set[str] = set()
    for name in names:
        label = _label(name)
        if label in seen:
            raise UsageError(
                f"the DataFrame written to table {table!r} has more than one column named "
                f"{label!r}: a field is one column; rename or drop the others "
                "(df.loc[:, ~df.columns.duplicated()] keeps the first)"
            )
        seen.add(label)


def _index_as_columns(frame: Any, table: str) -> tuple[Any, list[Hashable]]:
    """The frame with its named index levels as columns, and the columns to write: the
    frame's, then those levels (the rest of the index is dropped)."""
    import pandas

    columns = list(frame.columns)
    keep: list[int] = []
    for level, name in enumerate(frame.index.names):
        if name is None:
            continue  # an unnamed index (or level) is not data
        column = next((c for c in columns if _label(c) == _label(name)), None)
        if column is not None:
            values = frame.index.get_level_values(level)
            if values.equals(pandas.Index(frame[column])):
                continue  # the column holds it already (set_index(..., drop=False))
            raise UsageError(
                f"the DataFrame written to table {table!r} has an index named {name!r} and a "
                f"column named {name!r} with other values: one field cannot hold both; "
                "rename the index (df.rename_axis(...)) or drop it (df.reset_index(drop=True))"
            )
        keep.append(level)
    if not keep:
        return frame, columns
    names = [frame.index.names[level] for level in keep]
    _check_names([*columns, *names], table)
    return frame.reset_index(level=keep), [*columns, *names]


def _check_kinds(data: Any, columns: Sequence[Hashable], table: str) -> None:
    """A UsageError for a column Arrow has no type for (sparse, complex)."""
    import pandas

    for name in columns:
        dtype = data[name].dtype
        if isinstance(dtype, pandas.SparseDtype):
            raise UsageError(
                f"column {_label(name)!r} of the DataFrame written to table {table!r} is "
                f"sparse ({dtype}), which Arrow cannot hold: make it dense first "
                f"(df[{name!r}] = df[{name!r}].sparse.to_dense())"
            )
        if getattr(dtype, "kind", None) == "c":
            raise UsageError(
                f"column {_label(name)!r} of the DataFrame written to table {table!r} holds "
                f"complex numbers ({dtype}), which Arrow has no type for: write the real and "
                "imaginary parts as two fields (np.real, np.imag)"
            )


def _check_keys_present(data: Any, key: KeyLayout | None, table: str) -> None:
    """A UsageError naming the key field and row of a missing key value (NaN, None, NaT).

    Arrow reads pandas' NaN as null; a key is never null nor NaN, and the user wrote
    NaN, so the error says so rather than report a null the frame does not show."""
    if key is None:
        return
    for name in key.fields:
        if name not in data.columns:
            continue  # named in the error the write gives for a missing key column
        missing = data[name].isna().to_numpy()
        if missing.any():
            position = int(missing.argmax())
            value = data[name].iloc[position : position + 1].tolist()[0]
            raise UsageError(
                f"key field {name!r} of the DataFrame written to table {table!r} has no value "
                f"in row {position} (index {data.index[position]!r}: "
                f"{value!r}): NaN, None and NaT are missing values to pandas, and every record "
                f"needs its key; drop those rows "
                f"(df.dropna(subset=[{name!r}])) or fill them"
            )


def _by_column(
    data: Any,
    columns: Sequence[Hashable],
    schema: pa.Schema | None,
    key: KeyLayout | None,
    table: str,
    typed: set[str],
) -> pa.Table:
    """The frame converted one column at a time (after the whole-frame conversion failed,
    or with ``typed`` columns): a column inference cannot read, and each ``typed`` one,
    is typed by the table's field of its name, or named in a UsageError."""
    labels = [_label(name) for name in columns]
    key_of = _key_of(data, key)
    arrays = []
    for name, label in zip(columns, labels, strict=True):
        series = data[name]
        failure: Exception | None = None
        if label not in typed:
            try:
                arrays.append(pa.array(series, from_pandas=True))
                continue
            except _ARROW_FAILURES as exc:
                failure = exc
        field = schema.field(label) if schema is not None and label in schema.names else None
        if field is None or is_free(field):
            way = (
                "write the rows as records (df.to_dict('records')): a schema-free field "
                "takes values of any kind from records"
                if field is not None
                else f"give the column one type (a column holding both 1 and 'a' has none; "
                f"df[{name!r}].astype(str) makes every value a string), or declare the field "
                "schema-free (merkle.free_field) and write the rows as records "
                "(df.to_dict('records'))"
            )
            raise UsageError(
                f"column {label!r} of the DataFrame written to table {table!r} cannot be "
                f"converted to Arrow ({failure}): {way}"
            )
        if label in typed and isinstance(field.type, pa.BaseExtensionType):
            inferred = _as_inferred(series, field.type)
            if inferred is not None:
                arrays.append(inferred)
                continue
        values = series.astype(object).where(series.notna(), None).tolist()
        try:
            if label in typed:  # built as records are: extension types inside too
                arrays.append(record_column(label, values, field.type, key_of))
            else:
                arrays.append(typed_array(label, values, field.type, key_of))
        except SchemaError as exc:  # named like a write's: the table, then the field
            raise SchemaError(f"table {table!r}: {exc}") from None
    return pa.Table.from_arrays(arrays, names=labels)


def _key_of(data: Any, key: KeyLayout | None) -> Callable[[int], Any]:
    """The key of the row at a position, for errors (the position when the frame does
    not hold the key fields). The key columns are made Python values (not numpy
    scalars) once, at the first key asked: reading a pandas Series one row at a time
    costs tens of microseconds a row."""
    if key is None or not all(name in data.columns for name in key.fields):
        return lambda position: position
    parts = [data[name] for name in key.fields]
    converted: list[list[Any]] = []

    def columns() -> list[list[Any]]:
        if not converted:
            converted.extend(part.tolist() for part in parts)
        return converted

    if not key.composite:
        return lambda position: columns()[0][position]
    return lambda position: tuple(column[position] for column in columns())
