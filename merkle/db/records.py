"""The record operations of a ``Database`` beyond plain writes.

Partial and conditional writes (``update``, ``upsert``, ``delete_where``),
recorded as operations a rebasing commit re-runs (:mod:`merkle.db.ops`);
reads (``get_records``, ``get_arrow``, ``scan``, ``to_arrow``; each checks
the fields it is asked for against the table's schema), streaming reads
(``to_batches``), DataFrames (``to_pandas``, ``to_polars``) and the lazy
dataset DuckDB and Polars scan (``dataset``). They are a mixin of
:class:`~merkle.db.database.Database`, built on its table state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from merkle.db.commit import continues_committed
from merkle.db.inputs import check_keys, check_known_fields
from merkle.db.tablestate import TableChange, TableState
from merkle.errors import SchemaError
from merkle.lazy import LazyModule
from merkle.tablets.fieldids import FieldId
from merkle.tablets.patches import Patches
from merkle.tablets.table import Table

if TYPE_CHECKING:
    from merkle.db import ops as db_ops
    from merkle.db.database import Database
else:
    db_ops = LazyModule("merkle.db.ops")  # built by writes only (see merkle.db.database)

__all__ = ["RecordOps"]


def _hashable(value: Any) -> bool:
    """Whether ``value`` can be a dict key (a list, the other form of a composite key,
    cannot)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


class RecordOps:
    """Partial and conditional writes and the reads (mixed into ``Database``)."""

    if TYPE_CHECKING:

        def _state(self, name: str) -> TableState: ...
        def _table(self, name: str) -> Table: ...
        def _known(self, name: str, table: Table) -> Mapping[str, FieldId] | None: ...
        def _records(
            self, table: Table, rows: pa.Table, fields: Sequence[str] | None
        ) -> list[dict[str, Any]]: ...
        def _with_table(self, name: str, state: TableState | None, op: db_ops.Op) -> Database: ...
        def _upsert(
            self,
            table: str,
            records: Any,
            op: Callable[[str, pa.Table, Mapping[str, FieldId] | None], db_ops.Op],
            replayable: bool = False,
        ) -> Database: ...
        def _delete(
            self,
            table: str,
            keys: Sequence[Any],
            op: Callable[[str], db_ops.Op],
            replayable: bool = False,
        ) -> Database: ...

        _committed: Database | None

    @continues_committed
    def update(self, table: str, changes: Mapping[Any, Mapping[str, Any]]) -> Database:
        """Change only the given fields of existing records: ``{key: {field: value}}``.

        Keys without a record are left alone: their changes are neither checked nor
        learned (no field or type comes from them); a value of None removes the field.
        Replayed on a concurrent head, it changes the records as they are there
        (so it is recorded even when it changes nothing here)."""
        state = self._state(table)
        from merkle.db.changes import updated_rows

        # Copied now: a caller reusing its dicts must not change what a replay writes.
        changes = db_ops.snapshot(changes) if isinstance(changes, Mapping) else changes
        known = self._known(table, state.table)
        if state.table.root.typed:
            # Field-level patches: no record is read now (see merkle.tablets.patches).
            try:
                patched = _patched(state, changes)
            except SchemaError as exc:  # named like a write's: the table, then the field
                raise SchemaError(f"table {table!r}: {exc}") from None
            if patched is None:
                return self._unchanged_update(table, state, changes)
            changed, patches = patched
            new_state = state.with_change(changed, TableChange(patches=patches))
            op = db_ops.Update(table, changed.root.uid, changes, known)
            return self._with_table(table, new_state, op)
        done = updated_rows(self._table(table), changes)
        if done is None or not len(done[1]):
            return self._unchanged_update(table, state, changes)
        current, rows = done
        changed = (
            state.table.with_schema(current.root.schema) if current.root.typed else state.table
        )
        new_state = state.with_change(changed, TableChange(upserts=rows))
        op = db_ops.Update(table, changed.root.uid, changes, known)
        return self._with_table(table, new_state, op)

    def _unchanged_update(
        self, table: str, state: TableState, changes: Mapping[Any, Mapping[str, Any]]
    ) -> Database:
        """An update that changes nothing here, recorded (unless it names no key): on a
        concurrent head its keys may have records."""
        if not changes:
            return self  # type: ignore[return-value]
        op = db_ops.Update(table, state.table.root.uid, changes, self._known(table, state.table))
        return self._with_table(table, state, op)

    @continues_committed
    def upsert(
        self,
        table: str,
        rows: Any,
        *,
        when_matched: str = "update",
        when_not_matched: str = "insert",
        condition: Callable[[dict[str, Any], dict[str, Any]], Any] | None = None,
    ) -> Database:
        """A conditional upsert (SQL ``MERGE``, Lance ``merge_insert``).

        For each record of ``rows`` (as ``write`` takes them) whose key exists:
        ``when_matched`` "update" merges its fields into the record, "replace"
        writes it whole, "skip" leaves the record; with ``condition`` only when
        ``condition(current, new)`` is true. A record whose key does not exist
        is inserted unless ``when_not_matched`` is "skip". Recorded even when it
        writes nothing here: a replay on a concurrent head decides again."""
        state = self._state(table)
        current = self._table(table)
        from merkle.db.changes import upserted_records
        from merkle.db.inputs import once_readable

        # Read a one-shot input (a generator, a RecordBatchReader) once, and copy the
        # records: the op keeps them for a replay, which must see the same rows.
        # A DataFrame is converted as write converts it: with the table's types.
        schema = state.table.root.schema
        rows = db_ops.snapshot(once_readable(rows, schema, state.table.key, table))
        records = upserted_records(current, rows, when_matched, when_not_matched, condition, table)
        known = self._known(table, state.table)
        return self._upsert(
            table,
            records,
            lambda uid, _, __: db_ops.Upsert(
                table, uid, rows, when_matched, when_not_matched, condition, known
            ),
            replayable=True,
        )

    @continues_committed
    def delete_where(self, table: str, predicate: Any) -> Database:
        """Delete the records ``predicate`` holds for: a ``pyarrow.compute.Expression``
        (``pc.field("qty") == 0``) or a function of a record. Replayed on a
        concurrent head, it deletes what matches there (so it is recorded even when
        nothing matches here)."""
        from merkle.db.changes import deleted_keys

        keys = deleted_keys(self._table(table), predicate)
        known = self._known(table, self._state(table).table)
        return self._delete(
            table,
            keys,
            lambda uid: db_ops.DeleteWhere(table, uid, predicate, known),
            replayable=True,
        )

    def _read_fields(
        self, current: Table, table: str, fields: Sequence[str] | None
    ) -> list[str] | None:
        """The ``fields`` a read asked for, each one the table has (else a UsageError)."""
        schema = current.root.schema if current.root.typed else None
        return check_known_fields(fields, schema, table)

    def get_records(
        self, table: str, keys: Iterable[Any], fields: Sequence[str] | None = None
    ) -> dict[Any, dict[str, Any]]:
        """``{key: record}`` for the keys that exist (with the key field and ``fields``),
        in the order given.

        Each record is keyed by the key as the caller gave it, so ``found[key]`` finds
        it: a key the codec takes in several forms (a naive or an aware datetime for a
        timestamp key, a numpy int) would not always equal the record's own key value
        (a naive key field reads back naive). A key that cannot be a dict key (a list
        for a composite key) is keyed by the record's key (a tuple)."""
        keys = check_keys(keys, table)
        current = self._table(table)
        fields = self._read_fields(current, table, fields)
        codec = current.codec
        if codec is None or not keys:
            return {}
        encoded = [codec.encode(key) for key in keys]
        rows = current.get_encoded(sorted(set(encoded)), fields)
        records = self._records(current, rows, fields)
        if not records:
            return {}
        column = rows.column(current.root.key_field)
        by_encoded = dict(zip(codec.encode_array(column).to_pylist(), records, strict=True))
        key_of = current.key.key_of
        found: dict[Any, dict[str, Any]] = {}
        for key, data in zip(keys, encoded, strict=True):
            record = by_encoded.get(data)
            if record is not None:
                found[key if _hashable(key) else key_of(record)] = record
        return found

    def get_arrow(
        self, table: str, keys: Iterable[Any], fields: Sequence[str] | None = None
    ) -> pa.Table:
        """The records of the keys that exist as one Arrow table, in key order and the
        schema's types (``to_arrow``'s columns): a batch lookup without a Python object
        per value."""
        keys = check_keys(keys, table)
        current = self._table(table)
        return current.get_arrow(keys, self._read_fields(current, table, fields))

    def scan(
        self,
        table: str,
        fields: Sequence[str] | None = None,
        from_pk: Any = None,
        to_pk: Any = None,
        from_index: int | None = None,
        to_index: int | None = None,
        offset: int | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """Records in key order (``reverse``: descending); bounds are inclusive."""
        current = self._table(table)
        fields = self._read_fields(current, table, fields)
        batches = current.scan(
            fields=fields,
            from_pk=from_pk,
            to_pk=to_pk,
            from_index=from_index,
            to_index=to_index,
            offset=offset,
            limit=limit,
            reverse=reverse,
        )
        return (rec for batch in batches for rec in self._records(current, batch, fields))

    def to_arrow(
        self,
        table: str,
        fields: Sequence[str] | None = None,
        from_pk: Any = None,
        to_pk: Any = None,
    ) -> pa.Table:
        """The table (or a key range of it) as one Arrow table, in key order."""
        current = self._table(table)
        fields = self._read_fields(current, table, fields)
        return current.to_arrow(fields=fields, from_pk=from_pk, to_pk=to_pk)

    def to_batches(
        self,
        table: str,
        fields: Sequence[str] | None = None,
        from_pk: Any = None,
        to_pk: Any = None,
        filter: Any = None,
    ) -> pa.RecordBatchReader:
        """The table as a stream of record batches in key order, read a tablet at a time
        (bounded memory); ``filter`` is a ``pyarrow.compute.Expression``."""
        current = self._table(table)
        from merkle.db.streams import batch_reader, check_filter

        fields = self._read_fields(current, table, fields)
        return batch_reader(current, fields, from_pk, to_pk, check_filter(filter))

    def to_pandas(
        self,
        table: str,
        fields: Sequence[str] | None = None,
        from_pk: Any = None,
        to_pk: Any = None,
    ) -> Any:
        """The table (or a key range of it, as ``to_arrow``) as a pandas DataFrame
        (``merkle-db[pandas]``)."""
        from merkle.db.dataframes import to_pandas

        return to_pandas(self.to_arrow(table, fields, from_pk=from_pk, to_pk=to_pk))

    def to_polars(
        self,
        table: str,
        fields: Sequence[str] | None = None,
        from_pk: Any = None,
        to_pk: Any = None,
    ) -> Any:
        """The table (or a key range of it, as ``to_arrow``) as a Polars DataFrame
        (``merkle-db[polars]``)."""
        from merkle.db.dataframes import to_polars

        return to_polars(self.to_arrow(table, fields, from_pk=from_pk, to_pk=to_pk))

    def dataset(self, table: str) -> Any:
        """The table as a lazy ``pyarrow.dataset.Dataset`` (one fragment per tablet) that
        DuckDB and Polars scan with key-range and projection pushdown; string and binary
        views and run-end encoded fields are served plain (``string``, ``binary``, the
        value type), which Arrow's dataset scanner can filter."""
        from merkle.db.dataset import table_dataset  # pyarrow.dataset: only when asked

        return table_dataset(self._table(table))[0]


def _patched(
    state: TableState, changes: Mapping[Any, Mapping[str, Any]]
) -> tuple[Table, Patches] | None:
    """:func:`~merkle.db.changes.update_patches` of the changes to keys that have a record
    as the transaction sees them (None: nothing to do).

    A patch of a key without a record is dropped at commit, so it is made
    without asking which keys have one (that reads key blocks); but what the
    table learns must come from the values that are applied: only when the
    patches would change the schema (a new field, a type refined), or hold a
    value that does not fit it, are the keys looked up and the changes to keys
    without a record left out, as an upsert that skips a key checks and
    learns nothing of its row. A key deleted earlier in the transaction has
    no record; one written earlier has.
    """
    from merkle.db.changes import update_patches

    try:
        patched = update_patches(state.table, changes)
    except SchemaError as exc:
        failed: SchemaError | None = exc
        patched = None
    else:
        failed = None
        if patched is None or patched[0].root == state.table.root:
            return patched  # the schema as it was: a patch of no record does nothing
    codec = state.table.codec
    applied: Mapping[Any, Mapping[str, Any]] = changes
    if codec is not None:  # (None: a table never written, which update_patches leaves)
        encoded = [codec.encode(key) for key in changes]
        order = sorted(set(encoded))
        has = dict(zip(order, state.live(order).tolist(), strict=True))
        applied = {k: f for (k, f), e in zip(changes.items(), encoded, strict=True) if has[e]}
    if len(applied) == len(changes):
        if failed is not None:
            raise failed
        return patched
    return update_patches(state.table, applied) if applied else None
