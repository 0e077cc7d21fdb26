"""Streaming reads of a table: Arrow record batches in key order, and DataFrames.

:func:`batch_reader` is what ``Database.to_batches`` returns: a
``pyarrow.RecordBatchReader`` that reads one tablet at a time (a few ahead,
through the table store's byte-bounded segment cache), so a table far bigger
than memory streams in bounded memory. DataFrames are :mod:`merkle.db.dataframes`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from merkle.errors import UsageError
from merkle.lazy import compute as pc
from merkle.tablets.restore import filtered
from merkle.tablets.table import Table

__all__ = ["batch_reader", "check_filter"]


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
        return filtered(rows, predicate)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise UsageError(
            f"filter {predicate} cannot be evaluated on the table's rows: {exc}"
        ) from None
