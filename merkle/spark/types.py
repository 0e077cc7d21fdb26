"""Arrow types of a table as Spark types, and rows converted between the two.

A table's Arrow schema (:func:`merkle.tablets.bulk.arrow_schema`) maps to a
Spark schema with pyspark's own Arrow conversion: ``int64`` is ``BIGINT``,
``timestamp[us, tz=UTC]`` is ``TIMESTAMP``, a naive timestamp is
``TIMESTAMP_NTZ``, lists are arrays, decimals, structs, maps, dates keep
their Spark types. A schema-free field whose values do not share one type
(stored as CBOR) is ``VARIANT`` (or, with ``mixed=cbor``, ``BINARY`` holding
the CBOR bytes, marked in the field's metadata so that a write restores it).
The key field is never null.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, is_variant, to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DecimalType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    VariantType,
    _parse_datatype_json_string,
)

from merkle.errors import UsageError
from merkle.spark.variant import VariantError, from_variant, to_variant
from merkle.tablets.dicts import decoded_values
from merkle.tablets.fitexact import misfit_rows, row_text, safe_cast_may_round
from merkle.tablets.schema import show_value
from merkle.tablets.segment import (
    cbor_column,
    cbor_field,
    column_values,
    is_cbor_field,
    values_column,
)

__all__ = [
    "ENCODING",
    "RowConverter",
    "cbor_fields_of",
    "check_schema",
    "from_spark",
    "schema_from_json",
    "spark_schema",
]

#: Spark field metadata that marks a BINARY field holding CBOR values.
ENCODING = "merkle.encoding"
_VARIANT_FIELDS = [
    pa.field("value", pa.binary(), nullable=False),
    pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"}),
]
_NUMERIC = ("byte", "short", "integer", "long", "float", "double", "decimal")
#: The most digits Spark's DECIMAL holds.
SPARK_DECIMAL_DIGITS = 38
#: Spark's type for an unsigned integer of each width: the narrowest that holds every value.
_UNSIGNED: dict[int, DataType] = {
    8: ShortType(),
    16: IntegerType(),
    32: LongType(),
    64: DecimalType(20, 0),
}


def _spark_type(field: pa.Field, mixed: str, table: str) -> tuple[DataType, dict[str, str]]:
    if is_cbor_field(field):
        if mixed == "cbor":
            return BinaryType(), {ENCODING: "cbor"}
        return VariantType(), {}
    kind = field.type
    if pa.types.is_dictionary(kind):
        kind = kind.value_type  # Spark has no dictionary type: the values (cast when read)
    if pa.types.is_unsigned_integer(kind):
        return _UNSIGNED[kind.bit_width], {}  # Spark has none: the next signed type holds all
    try:
        spark = from_arrow_type(_holding_type(kind))
    except Exception as exc:  # pyspark raises its own error types
        raise UsageError(
            f"field {field.name!r} of table {table!r} has Arrow type {field.type}, which "
            f"Spark cannot represent ({exc})"
        ) from None
    wide = _wide_decimal(spark)
    if wide is not None:  # pyspark maps it, and Spark then fails in the JVM
        raise UsageError(
            f"field {field.name!r} of table {table!r} has Arrow type {field.type}, which "
            f"Spark cannot represent (a decimal of {wide.precision} digits: Spark's DECIMAL "
            f"holds at most {SPARK_DECIMAL_DIGITS})"
        )
    return spark, {}


def _holding_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` with each type pyspark's Arrow conversion lacks, at any depth, as one it has
    that holds every value exactly (rows are cast to it when read): ``date64`` as
    ``date32`` (DATE), ``float16`` as ``float32`` (FLOAT), ``string_view`` as ``string``."""
    if pa.types.is_date64(kind):
        return pa.date32()
    if pa.types.is_float16(kind):
        return pa.float32()
    if pa.types.is_string_view(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_holding_type(f.type)) for f in kind])
    if pa.types.is_map(kind):
        key, item = kind.key_field, kind.item_field
        return pa.map_(
            key.with_type(_holding_type(key.type)), item.with_type(_holding_type(item.type))
        )
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        value = kind.value_field.with_type(_holding_type(kind.value_type))
        return pa.list_(value) if pa.types.is_list(kind) else pa.large_list(value)
    return kind


def _wide_decimal(kind: DataType) -> DecimalType | None:
    """The first decimal in ``kind`` (at any depth) wider than Spark's, or None."""
    if isinstance(kind, DecimalType):
        return kind if kind.precision > SPARK_DECIMAL_DIGITS else None
    if isinstance(kind, ArrayType):
        return _wide_decimal(kind.elementType)
    if isinstance(kind, MapType):
        return _wide_decimal(kind.keyType) or _wide_decimal(kind.valueType)
    if isinstance(kind, StructType):
        return next((w for f in kind if (w := _wide_decimal(f.dataType)) is not None), None)
    return None


def spark_schema(
    arrow: pa.Schema, *, key_fields: Sequence[str], mixed: str, table: str
) -> tuple[StructType, dict[str, str]]:
    """The Spark schema of a table's Arrow schema (see the module doc), and the fields left
    out of it because Spark cannot represent them: name -> why. A read that leaves such a
    field out (a projection, a schema of the user's) can still read the table."""
    fields, unreadable = [], {}
    for field in arrow:
        try:
            kind, metadata = _spark_type(field, mixed, table)
        except UsageError as exc:
            unreadable[field.name] = str(exc)
            continue
        fields.append(StructField(field.name, kind, field.name not in key_fields, metadata))
    return StructType(fields), unreadable


def _nullable(kind: DataType) -> DataType:
    """``kind`` with every nested field, array element and map value nullable."""
    if isinstance(kind, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in kind])
    if isinstance(kind, ArrayType):
        return ArrayType(_nullable(kind.elementType), True)
    if isinstance(kind, MapType):
        return MapType(kind.keyType, _nullable(kind.valueType), True)
    return kind


def _compatible(stored: StructField, asked: StructField) -> bool:
    have, want = stored.dataType, asked.dataType
    if have == want or _nullable(have) == _nullable(want):
        return True  # NOT NULL marks inside may differ: the values are the same
    if isinstance(want, VariantType):
        return True  # any value has a VARIANT form (or a clear error when read)
    if isinstance(have, VariantType) and isinstance(want, BinaryType):
        return True  # the CBOR bytes
    numeric = (have.typeName() in _NUMERIC or isinstance(have, DecimalType)) and (
        want.typeName() in _NUMERIC or isinstance(want, DecimalType)
    )
    if numeric:
        return True  # cast when read; a value that does not fit is an error then
    if isinstance(want, StringType) and have.typeName() in ("timestamp", "timestamp_ntz"):
        return False
    if isinstance(have, ArrayType) and isinstance(want, ArrayType):
        return _compatible(
            StructField("item", have.elementType), StructField("item", want.elementType)
        )
    return False


def check_schema(
    asked: StructType,
    stored: StructType,
    *,
    table: str,
    unreadable: Mapping[str, str] | None = None,
) -> StructType:
    """A user's schema checked against the table's: each field must exist with a usable type.

    Fields may be left out (a projection) and put in any order; a numeric
    type may differ (values are cast as they are read), any field may be
    read as VARIANT, a mixed field as BINARY (its CBOR). UsageError names
    the first field that does not fit.
    """
    names = asked.fieldNames()
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:  # Spark would fail deep in the JVM, reading the rows
        raise UsageError(
            f"the schema names field {repeated[0]!r} more than once: name each field once"
        )
    by_name = {field.name: field for field in stored}
    for field in asked:
        found = by_name.get(field.name)
        if found is None and unreadable and field.name in unreadable:
            raise UsageError(unreadable[field.name] + ": leave it out of the schema")
        if found is None:
            raise UsageError(
                f"the schema names field {field.name!r}, which table {table!r} does not hold "
                f"(its fields: {', '.join(by_name)})"
            )
        if not _compatible(found, field):
            raise UsageError(
                f"the schema reads field {field.name!r} of table {table!r} as "
                f"{field.dataType.simpleString()}, but it holds "
                f"{found.dataType.simpleString()} values: use that type (or VARIANT)"
            )
    return asked


def _variant_array(values: list[Any], name: str) -> pa.Array:
    blobs, metas, nulls = [], [], []
    placeholder = to_variant(None)
    for value in values:
        try:
            encoded = placeholder if value is None else to_variant(value)
        except VariantError as exc:
            raise UsageError(
                f"field {name!r} holds a value VARIANT cannot hold exactly ({exc}); read the "
                'table with .option("mixed", "cbor") to get such fields as CBOR bytes'
            ) from None
        blobs.append(encoded[0])
        metas.append(encoded[1])
        nulls.append(value is None)
    return pa.StructArray.from_arrays(
        [pa.array(blobs, pa.binary()), pa.array(metas, pa.binary())],
        fields=_VARIANT_FIELDS,
        mask=pa.array(nulls, pa.bool_()),
    )


@dataclass(frozen=True)
class RowConverter:
    """Turns a table's rows (segment form) into record batches of one Spark schema.

    Holds the schema as JSON so that it pickles to executors cheaply.
    """

    schema_json: str
    stored_cbor: tuple[str, ...]  # fields the table stores as CBOR somewhere

    @classmethod
    def of(cls, schema: StructType, stored: pa.Schema) -> RowConverter:
        cbor = tuple(f.name for f in stored if is_cbor_field(f))
        return cls(schema.json(), cbor)

    def _schema(self) -> StructType:
        parsed = _parse_datatype_json_string(self.schema_json)
        assert isinstance(parsed, StructType)
        return parsed

    def __call__(self, rows: pa.Table, max_rows: int = 1 << 16) -> Iterator[pa.RecordBatch]:
        schema = self._schema()
        target = to_arrow_schema(schema, timezone="UTC")
        n = rows.num_rows
        columns = []
        for spark_field, field in zip(schema, target, strict=True):
            name = field.name
            if name not in rows.column_names:
                columns.append(pa.nulls(n, field.type))
                continue
            column = rows.column(name)
            if isinstance(spark_field.dataType, VariantType):
                columns.append(_variant_array(column_values(rows, name), name))
            elif spark_field.metadata.get(ENCODING) == "cbor" or (
                name in self.stored_cbor and isinstance(spark_field.dataType, BinaryType)
            ):
                stored = rows.schema.field(name)
                columns.append(column if is_cbor_field(stored) else cbor_column(rows, name))
            else:
                try:
                    columns.append(_cast_values(column, field.type))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, _NotExactError) as exc:
                    raise UsageError(
                        f"field {name!r} holds {column.type} values that do not fit the "
                        f"schema's {spark_field.dataType.simpleString()}: {exc}; read the "
                        "field as a type that holds its values (its stored type does)"
                    ) from None
        table = pa.Table.from_arrays(columns, schema=target)
        yield from table.to_batches(max_chunksize=max_rows)


class _NotExactError(ValueError):
    """A stored value the type a schema asks for holds only rounded (see :func:`_check_exact`)."""


def _cast_values(column: pa.ChunkedArray | pa.Array, target: pa.DataType) -> Any:
    """``column`` cast to ``target``; ArrowInvalid or :class:`_NotExactError` for a value that
    does not fit it exactly. Arrow refuses an integer to a decimal whose precision is
    below the integer type's whole range (int32 to decimal(5, 1)) even when every value
    fits, so such a cast goes through the widest decimal of the target's scale, which
    checks values. Arrow's safe cast rounds a float into a narrower float (1e300 became
    FLOAT's infinity), a decimal into a float and a float into a decimal without an
    error: such a cast is checked as a write checks one (:func:`_check_exact`).

    A struct child Spark marks NOT NULL holds nulls under a null struct (or a null
    array element): Spark writes it so, and reads it so. Arrow's cast (even to the
    same type) refuses such nulls, so the column is cast with every nested field
    nullable and then given ``target`` as it is (no values change)."""
    if column.type == target:
        return column
    relaxed = _relaxed(target)
    stored = column
    if pa.types.is_decimal(target) and pa.types.is_integer(column.type):
        column = column.cast(pa.decimal128(38, target.scale))
    cast = column.cast(relaxed)
    _check_exact(stored, cast)
    return _as_type(cast, target)


def _check_exact(column: pa.ChunkedArray | pa.Array, cast: pa.ChunkedArray | pa.Array) -> None:
    """:class:`_NotExactError` naming the first value of ``column`` that ``cast`` (it cast by
    Arrow's safe cast) holds only rounded, where that cast may round at all
    (:func:`~merkle.tablets.fitexact.safe_cast_may_round`).

    The check is the write path's (:mod:`merkle.tablets.fitexact`): casting back must
    give every value again, and a decimal and a float must be the same number. So a
    value is read as written: NaN and the infinities stay themselves, -0.0 stays -0.0
    in a float and is 0 in a decimal, as a write stores them.
    """
    if pa.types.is_dictionary(column.type):
        column = decoded_values(column)
    if not safe_cast_may_round(column.type, cast.type):
        return
    plain = _relaxed(column.type)  # a NOT NULL child may hold nulls under a null parent
    column = _as_type(column, plain)
    back = cast.cast(plain, safe=False)
    misfits = misfit_rows(column, cast, back)
    if misfits.any():
        row = int(misfits.argmax())
        raise _NotExactError(
            f"the value {show_value(row_text(column, row))} would become "
            f"{show_value(row_text(cast, row))}"
        )


def _as_type(column: pa.ChunkedArray | pa.Array, target: pa.DataType) -> pa.ChunkedArray | pa.Array:
    """``column`` (of ``target``'s layout, nullability aside) as ``target`` (see
    :func:`_relabel`)."""
    if column.type == target:
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([_relabel(chunk, target) for chunk in column.chunks], target)
    return _relabel(column, target)


def _relaxed(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every nested field nullable (map keys stay as they are)."""
    if pa.types.is_struct(kind):
        return pa.struct(
            [
                kind.field(i).with_type(_relaxed(kind.field(i).type)).with_nullable(True)
                for i in range(kind.num_fields)
            ]
        )
    if pa.types.is_map(kind):
        item = kind.item_field
        return pa.map_(kind.key_field, item.with_type(_relaxed(item.type)).with_nullable(True))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        value = kind.value_field
        relaxed = value.with_type(_relaxed(value.type)).with_nullable(True)
        return pa.list_(relaxed) if pa.types.is_list(kind) else pa.large_list(relaxed)
    return kind


class _Relabeled:
    """An array's data under another type of its layout, exported through the Arrow
    PyCapsule interface (``pa.array`` imports it with the type as given)."""

    def __init__(self, array: pa.Array, target: pa.DataType) -> None:
        self.array, self.target = array, target

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        _, data = self.array.__arrow_c_array__()
        return self.target.__arrow_c_schema__(), data


def _relabel(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` (of ``target``'s layout, nullability aside) as an array of ``target``,
    no values copied: ``Array.view`` refuses nulls under a NOT NULL child even where
    the parent is null, so the type is given through the Arrow C data interface."""
    return pa.array(_Relabeled(array, target))


def from_spark(batch: pa.RecordBatch | pa.Table, cbor_fields: Sequence[str] = ()) -> pa.Table:
    """Spark's Arrow rows as merkle rows: VARIANT columns become values, CBOR fields marked.

    A VARIANT column becomes a native column when its values share one type
    (as records do), else a CBOR one; a BINARY field named in
    ``cbor_fields`` (read with ``mixed=cbor``) holds CBOR already. Other
    columns pass as they are: writing normalises them (doc/format.md).
    """
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    fields, columns = [], []
    for field, column in zip(table.schema, table.columns, strict=True):
        if pa.types.is_struct(field.type) and is_variant(field.type):
            values = [
                None if v is None else from_variant(v["value"], v["metadata"])
                for v in column.to_pylist()
            ]
            new_field, array = values_column(field.name, values)
            fields.append(new_field)
            columns.append(array)
        elif field.name in cbor_fields and pa.types.is_binary(field.type):
            fields.append(cbor_field(field.name))
            columns.append(column)
        else:
            fields.append(field)
            columns.append(column)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def cbor_fields_of(schema: StructType) -> tuple[str, ...]:
    """Fields a Spark schema marks as CBOR bytes (read with ``mixed=cbor``)."""
    return tuple(f.name for f in schema if f.metadata.get(ENCODING) == "cbor")


def schema_from_json(text: str) -> StructType:
    parsed = _parse_datatype_json_string(text)
    if not isinstance(parsed, StructType):
        raise UsageError(f"not a Spark struct schema: {json.dumps(text)[:80]}")
    return parsed
