"""Parquet columns read as the table's types, never rounded or cut.

A Parquet file's columns have their own Arrow types; ``merkle load`` casts
those the table (or ``--column-types``) types to them. A value that does not
convert is a CliError naming the file, the row, the field, the record's key
and the value (pyarrow's own message names none of them). pyarrow's safe cast
still rounds a float64 into float32 and drops a timestamp's time of day into a
date without a word; ``Database.write`` refuses both, so a cast is kept only
where it holds every value exactly, checked as the write path checks Arrow
data (``merkle.tablets.fitexact``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from merkle.cli.common import CliError
from merkle.tablets.fitexact import misfit_rows, needs_exactness_check, row_text
from merkle.tablets.fits import loss_check

__all__ = ["cast_columns"]


def cast_columns(
    batch: pa.RecordBatch,
    types: Mapping[str, pa.DataType],
    head: str,
    key_fields: Sequence[str],
    before: int,
) -> pa.RecordBatch:
    """``batch`` (rows ``before + 1``... of a Parquet file) with the columns of ``types``
    cast to them; a value that does not convert is a CliError naming the file, the row,
    the field, the record's key and the value (pyarrow's own message names none of them).

    pyarrow's safe cast still rounds a float64 into float32 and drops a timestamp's
    time of day into a date, without a word; ``Database.write`` refuses both. So a cast
    is kept only where casting back gives every value again (and a decimal and a float
    are the same number), as the write path checks Arrow data
    (``merkle.tablets.fitcolumn``); the first value that does not is the error.
    """
    fields = [
        batch.schema.field(name).with_type(types[name])
        if name in types
        else batch.schema.field(name)
        for name in batch.schema.names
    ]
    try:
        cast = batch.cast(pa.schema(fields))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise CliError(_cast_error(batch, types, head, key_fields, before, exc)) from None
    for name in types:
        if name in batch.schema.names and batch.column(name).type != types[name]:
            _check_exact(batch, name, cast.column(name), head, key_fields, before)
    return cast


def _check_exact(
    batch: pa.RecordBatch,
    name: str,
    candidate: pa.Array,
    head: str,
    key_fields: Sequence[str],
    before: int,
) -> None:
    """CliError naming the first value of column ``name`` that ``candidate`` (the column
    cast to its field's type) does not hold exactly: one the cast rounded or cut."""
    column = batch.column(name)
    try:
        back = candidate.cast(column.type, safe=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return  # no way back (string into a number): the safe cast checked it
    if back.equals(column) and not needs_exactness_check(column.type, candidate.type):
        return
    misfits = misfit_rows(column, candidate, back)
    if not misfits.any():
        return
    row = int(misfits.argmax())
    value, became = row_text(column, row), row_text(candidate, row)
    lost = loss_check(candidate.type)
    reason = (None if lost is None or value is None else lost(value)) or (
        f"it would become {became!r}"
    )
    way_out = "convert the column in the file"
    if pa.types.is_floating(column.type) and pa.types.is_floating(candidate.type):
        way_out += (
            f", or widen the field (merkle table alter DB TABLE --widen {name}:{column.type})"
        )
    raise CliError(
        f"{head}row {before + row + 1}, field {name!r}"
        f"{_key_at(batch, key_fields, row)}: value {value!r} is not {candidate.type} "
        f"({reason}): {way_out}"
    )


def _key_at(batch: pa.RecordBatch, key_fields: Sequence[str], row: int) -> str:
    """``, key K`` of the record at ``row`` of ``batch`` (empty when it has no key column)."""
    names = [n for n in key_fields if n in batch.schema.names]
    key = [batch.column(n).slice(row, 1).to_pylist()[0] for n in names]
    return f", key {key[0]!r}" if len(key) == 1 else f", key {tuple(key)!r}" if key else ""


def _cast_error(
    batch: pa.RecordBatch,
    types: Mapping[str, pa.DataType],
    head: str,
    key_fields: Sequence[str],
    before: int,
    exc: BaseException,
) -> str:
    """Why ``batch`` does not cast to ``types``: the first column, and its first row, that fail."""
    for name in batch.schema.names:
        target = types.get(name)
        column = batch.column(name)
        if target is None or _casts(column, target) is None:
            continue
        if not _casts_at_all(column.type, target):
            return head + (
                f"column {name!r} is {column.type} in the file and cannot be read as {target}"
            )
        lo, hi = 0, len(column)  # the first failing row lies in [lo, hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _casts(column.slice(lo, mid - lo), target) is not None:
                hi = mid
            else:
                lo = mid
        value = column.slice(lo, 1).to_pylist()[0]
        problem = _casts(column.slice(lo, 1), target)
        return head + (
            f"row {before + lo + 1}, field {name!r}{_key_at(batch, key_fields, lo)}: "
            f"value {value!r} is not {target} ({problem})"
        )
    return head + " ".join(str(exc).split())


def _casts(column: pa.Array, target: pa.DataType) -> str | None:
    """Why ``column`` does not cast (safely) to ``target``, or None when it does."""
    try:
        column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        return " ".join(str(exc).split())
    return None


def _casts_at_all(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Arrow has a cast from ``source`` to ``target`` (an empty array casts)."""
    return _casts(pa.array([], source), target) is None
