"""A table's rows as pandas and Polars DataFrames: ``to_arrow`` converted.

``to_pandas`` and ``to_polars`` are pyarrow's and Polars' conversions of the
Arrow table (optional extras ``merkle-db[pandas]``, ``merkle-db[polars]``),
with these rules:

- A type the library cannot take but can take in an equal form, value for
  value, is converted to that form first: a ``decimal256`` of at most 38 digits
  and a decimal of negative scale become the ``decimal128`` Polars holds; a
  view (``string_view``, ``binary_view``) or an extension type (``uuid``) inside
  a list, struct or map becomes the plain type pandas takes (a uuid there is
  its 16 bytes, as pyarrow gives a uuid inside a struct). A ``bool8``, at the
  top or inside, is read as ``bool`` (True and False, as records read it), not
  as the ``int8`` numbers pyarrow gives, which a write refuses for it. Nothing
  is converted that would change a value.
- Any other value the library cannot convert (a union, a time to the
  nanosecond or a date past year 9999 in pandas, a time zone Polars does not
  know) is a UsageError naming each such field and the library's reason, and
  saying to read it with ``to_arrow`` or leave it out with ``fields=``. The
  whole table is converted at once, as always; only when that fails is it
  converted field by field, to find the fields to name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from merkle.errors import UsageError
from merkle.tablets.freeform import check_zones

__all__ = ["to_pandas", "to_polars"]


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
    stored = arrow.schema
    arrow = _cast(arrow, [_pandas_top(field.type) for field in stored])

    def convert(part: pa.Table) -> Any:
        return _pandas_frame(pandas, part)

    return _per_field("to_pandas", "pandas", arrow, convert, stored)


def _pandas_frame(pandas: Any, arrow: pa.Table) -> Any:
    """``arrow`` as a DataFrame, integers beside nulls exact (see :func:`to_pandas`)."""
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


def _pandas_top(kind: pa.DataType) -> pa.DataType:
    """``kind``, a field's type, as it is converted to pandas: a ``bool8`` as ``bool``
    (pyarrow gives its ``int8`` storage numbers, but its values are True and False, as
    every other read gives them and as a write takes them), and the types inside a
    list, struct or map as :func:`_pandas_inner` makes them."""
    if _is_bool8(kind):
        return pa.bool_()
    return _rebuild(kind, _pandas_inner)


def _is_bool8(kind: pa.DataType) -> bool:
    return isinstance(kind, pa.BaseExtensionType) and kind.extension_name == "arrow.bool8"


def _pandas_inner(kind: pa.DataType) -> pa.DataType:
    """``kind``, a type inside a list, struct or map, as pyarrow converts it to pandas:
    an extension type as its storage (pyarrow refuses one inside a list, and gives one
    inside a struct as its storage) but a ``bool8`` as ``bool`` (see :func:`_pandas_top`),
    a view and a fixed-size binary as the plain type (refused inside a list; the same
    ``str`` and ``bytes`` values)."""
    if _is_bool8(kind):
        return pa.bool_()
    if isinstance(kind, pa.BaseExtensionType):
        return _pandas_inner(kind.storage_type)
    if pa.types.is_string_view(kind):
        return pa.large_string()
    if pa.types.is_binary_view(kind) or pa.types.is_fixed_size_binary(kind):
        return pa.large_binary()
    return _rebuild(kind, _pandas_inner)


def to_polars(arrow: pa.Table) -> Any:
    """A Polars DataFrame of an Arrow table (needs ``merkle-db[polars]``).

    Polars has no 256-bit decimals (it panics on them, a ``BaseException``) and
    no negative scales: a ``decimal256`` of at most 38 digits is read as the
    ``decimal128`` of the same precision and scale, a decimal of negative scale
    as the ``decimal128`` of scale 0 with the digits its values need (every
    value fits, none changes); a wider one is a UsageError naming the field.
    """
    try:
        import polars
    except ImportError:
        raise UsageError("to_polars needs polars: pip install 'merkle-db[polars]'") from None
    stored = arrow.schema
    arrow = _cast(arrow, [_polars_type(field.type, field.name) for field in stored])
    return _per_field("to_polars", "Polars", arrow, polars.from_arrow, stored)


#: The widest decimal Polars holds, in digits.
_POLARS_DIGITS = 38


def _polars_type(kind: pa.DataType, name: str) -> pa.DataType:
    """``kind`` with each decimal Polars cannot hold (``decimal256``, a negative scale;
    also inside lists, structs and maps) as the ``decimal128`` holding the same values;
    an equal type when there is none."""
    if pa.types.is_decimal(kind) and (pa.types.is_decimal256(kind) or kind.scale < 0):
        digits = kind.precision - min(kind.scale, 0)  # 12300 in decimal(3, -2): 5 digits
        if digits > _POLARS_DIGITS:
            raise UsageError(
                f"field {name!r} is a {kind}: Polars holds decimals of at most "
                f"{_POLARS_DIGITS} digits{_scaled(kind, digits)}; read it with to_arrow or "
                "to_pandas, or leave it out of to_polars (fields=[...])"
            )
        return pa.decimal128(digits, max(kind.scale, 0))
    return _rebuild(kind, lambda inner: _polars_type(inner, name))


def _scaled(kind: pa.DataType, digits: int) -> str:
    """What a negative scale adds to a decimal's digits, for the error; "" for none."""
    return f" (its values have up to {digits} at scale 0)" if kind.scale < 0 else ""


def _rebuild(kind: pa.DataType, child: Callable[[pa.DataType], pa.DataType]) -> pa.DataType:
    """``kind`` (a list, struct or map) with ``child`` applied to the type of each of its
    members; ``kind`` itself when none changes, or when it has no members."""
    if pa.types.is_map(kind):
        key, item = child(kind.key_type), child(kind.item_type)
        if key == kind.key_type and item == kind.item_type:
            return kind
        return pa.map_(kind.key_field.with_type(key), kind.item_field.with_type(item))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        value = child(kind.value_type)
        if value == kind.value_type:
            return kind
        make = pa.list_ if pa.types.is_list(kind) else pa.large_list
        return make(kind.value_field.with_type(value))
    if pa.types.is_fixed_size_list(kind):
        value = child(kind.value_type)
        if value == kind.value_type:
            return kind
        return pa.list_(kind.value_field.with_type(value), kind.list_size)
    if pa.types.is_struct(kind):
        members = [kind.field(i) for i in range(kind.num_fields)]
        types = [child(member.type) for member in members]
        if all(t == member.type for t, member in zip(types, members, strict=True)):
            return kind
        return pa.struct([m.with_type(t) for m, t in zip(members, types, strict=True)])
    return kind


def _cast(arrow: pa.Table, types: list[pa.DataType]) -> pa.Table:
    """``arrow`` with its columns cast to ``types``; ``arrow`` itself when they are its own."""
    if all(a.type == t for a, t in zip(arrow.schema, types, strict=True)):
        return arrow
    fields = [field.with_type(t) for field, t in zip(arrow.schema, types, strict=True)]
    return arrow.cast(pa.schema(fields, metadata=arrow.schema.metadata))


def _failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the library failing to convert: an Exception, or a Rust panic
    (Polars', a ``BaseException``), not an interrupt or an exit."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _per_field(
    how: str,
    library: str,
    arrow: pa.Table,
    convert: Callable[[pa.Table], Any],
    stored: pa.Schema,
) -> Any:
    """``convert(arrow)``; when it fails, a UsageError naming each field that fails alone
    (converted one by one only then) with its ``stored`` type and the library's reason.
    The original error when every field converts alone (not a value's fault, such as
    running out of memory)."""
    try:
        return convert(arrow)
    except BaseException as exc:
        if not _failure(exc):
            raise
        error = exc
    problems = []
    for i, field in enumerate(stored):
        try:
            convert(arrow.select([i]))
        except BaseException as exc:
            if not _failure(exc):
                raise
            reason = _reason(field.type, library, exc)
            problems.append(f"field {field.name!r} ({field.type}): {reason}")
    if not problems:
        raise error
    raise UsageError(
        f"{how}: {library} cannot convert the values of {'; '.join(problems)}. Read "
        f"{'them' if len(problems) > 1 else 'it'} as Arrow (to_arrow, to_batches), where "
        f"every value is kept exactly, or leave {'them' if len(problems) > 1 else 'it'} out "
        f"of {how} (fields=[...] naming the others)"
    ) from None


def _reason(kind: pa.DataType, library: str, exc: BaseException) -> str:
    """Why ``library`` cannot convert a field of ``kind``: the first line of its error
    (shortened), or what is known of the kind (a union, whose error dumps the type)."""
    if _holds_union(kind):
        return f"{library} has no union type"
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    reason = reason.rstrip(".")
    return reason if len(reason) <= 200 else reason[:200] + "..."


def _holds_union(kind: pa.DataType) -> bool:
    """Whether ``kind`` is a union or holds one (in a list, struct, map or extension)."""
    if pa.types.is_union(kind):
        return True
    if isinstance(kind, pa.BaseExtensionType):
        return _holds_union(kind.storage_type)
    if pa.types.is_dictionary(kind):
        return _holds_union(kind.value_type)
    return any(_holds_union(kind.field(i).type) for i in range(kind.num_fields))
