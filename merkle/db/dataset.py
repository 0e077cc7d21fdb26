"""A table as a lazy ``pyarrow.dataset.Dataset``, so DuckDB, Polars and pyarrow push work into it.

``Database.dataset(table)`` returns a real ``pyarrow.dataset`` (a
``FileSystemDataset`` of the IPC format) with one *fragment per tablet*: a
virtual file, served by a ``pyarrow.fs.PyFileSystem`` handler, whose content
is that tablet's rows (pending changes laid on) in the table's schema (but
for views and run-end encoding: below). Each
fragment carries its key range as its partition expression, so a filter on
the key (``WHERE id BETWEEN 10 AND 20`` in DuckDB, ``pl.col("id") >= 10`` in
Polars) prunes the tablets outside it before any of them is read; only the
projected columns are decoded. Nothing is read until a query runs.

DuckDB scans it as an Arrow dataset (``duckdb.sql("select ... from ds")``
with ``ds`` in scope, or ``con.register``); Polars with
``pl.scan_pyarrow_dataset(ds)``. A composite key prunes on its first field.

Fields are served as ``to_arrow`` gives them but for string and binary views
and run-end encoding (at any depth), which are served in their stored, plain
type (:func:`~merkle.tablets.schema.served_type`): Arrow's dataset scanner has
no filter or take kernel for them, so a dataset holding one could not be
filtered at all, not even on its key.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from merkle.errors import SchemaError
from merkle.tablets.conform import present
from merkle.tablets.keys import KeyCodec
from merkle.tablets.schema import served_type
from merkle.tablets.table import Table
from merkle.tablets.tree import LeafSlice

__all__ = ["table_dataset"]


class _TabletFiles(pafs.FileSystemHandler):  # type: ignore[misc]
    """Serves ``tablet-<i>.arrow``: the rows of leaf ``i`` as an Arrow IPC file (read only)."""

    def __init__(self, table: Table, leaves: list[LeafSlice]) -> None:
        self.table = table
        self.leaves = leaves
        self.reads: list[int] = []  # leaves materialised, in order (tests look)
        self._recent: OrderedDict[str, pa.Buffer] = OrderedDict()
        self._lock = threading.Lock()

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return id(self)

    def get_type_name(self) -> str:
        return "merkle-tablets"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return [pafs.FileInfo(path, pafs.FileType.File) for path in paths]

    def get_file_info_selector(self, selector: Any) -> list[pafs.FileInfo]:
        return self.get_file_info([f"tablet-{i}.arrow" for i in range(len(self.leaves))])

    def _content(self, path: str) -> pa.Buffer:
        with self._lock:
            found = self._recent.get(path)
            if found is not None:
                return found
        index = int(path.removeprefix("tablet-").removesuffix(".arrow"))
        table = self.table
        overlay = table.overlay()
        rows = _one_dictionary(
            _served(table, table._tree().materialize(self.leaves[index], overlay, None))
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, rows.schema) as writer:
            writer.write_table(rows)
        data = sink.getvalue()
        with self._lock:
            self.reads.append(index)
            self._recent[path] = data
            while len(self._recent) > 4:  # a fragment is opened twice: schema, then rows
                self._recent.popitem(last=False)
        return data

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self._content(path))

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def _read_only(self, *args: Any) -> Any:
        raise OSError("a merkle table's dataset is read-only: write through Database.write")

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only


def _served(table: Table, raw: pa.Table) -> pa.Table:
    """Rows as read from segments, as the dataset serves them: as ``to_arrow`` gives them
    (``Table.present``) but with each field of ``served_type``."""
    schema = table.schema
    if not table.root.typed or schema is None:
        return table.present(raw)
    served = pa.schema(
        [field.with_type(served_type(field.type)) for field in schema], metadata=schema.metadata
    )
    return present(raw, served, table.key)


def _one_dictionary(rows: pa.Table) -> pa.Table:
    """``rows`` with one dictionary per dictionary field, as an IPC file must hold them.

    A tablet's rows come as several chunks (pages, pending batches), each
    dictionary field with its own dictionary; an Arrow IPC *file* allows one
    per field, so they are unified (same index type). When the tablet holds
    more distinct values than that index type numbers, no file can: a
    SchemaError names the field and the widening that makes room.
    """
    if not any(pa.types.is_dictionary(f.type) for f in rows.schema):
        return rows
    try:
        return rows.unify_dictionaries()
    except pa.ArrowInvalid:
        pass
    for field, column in zip(rows.schema, rows.columns, strict=True):
        if not pa.types.is_dictionary(field.type):
            continue
        try:
            pa.table([column], names=[field.name]).unify_dictionaries()
        except pa.ArrowInvalid:
            kind = field.type
            value = f"pa.{kind.value_type}()" if str(kind.value_type).isidentifier() else "..."
            raise SchemaError(
                f"a tablet holds more distinct values of dictionary field {field.name!r} "
                f"than its index type {kind.index_type} numbers, and a dataset() fragment "
                f"holds one dictionary per field: widen the field (alter_schema(table, "
                f"widen={{{field.name!r}: pa.dictionary(pa.int32(), {value})}})), or read "
                f"it with to_arrow/to_batches"
            ) from None
    return rows.unify_dictionaries()


def _unreversed(codec: KeyCodec) -> tuple[KeyCodec, bool]:
    flipped = False
    while hasattr(codec, "inner"):
        codec, flipped = codec.inner, not flipped
    return codec, flipped


def _key_range(table: Table, leaf: LeafSlice, kind: pa.DataType) -> ds.Expression | None:
    """What a leaf's rows satisfy on the (first) key field (of Arrow type ``kind``): its key
    range as an expression."""
    codec = table.codec
    if codec is None or (leaf.lo is None and leaf.hi is None):
        return None
    key = table.key
    base, flipped = _unreversed(codec)
    lo = None if leaf.lo is None else codec.decode(leaf.lo)
    hi = None if leaf.hi is None else codec.decode(leaf.hi)
    strict = True  # the upper separator belongs to the next leaf
    if key.composite:
        _, first_flipped = _unreversed(base.components[0])  # type: ignore[attr-defined]
        flipped = flipped != first_flipped
        lo = None if lo is None else lo[0]
        hi = None if hi is None else hi[0]
        strict = False  # other components vary under one first component
    elif hasattr(base, "components"):
        return None  # a tuple-valued key field: no pruning
    field = ds.field(key.fields[0])
    lo, hi = _as_field_type(lo, kind), _as_field_type(hi, kind)
    if flipped:
        lo, hi = hi, lo
        lower_strict, upper_strict = strict, False
    else:
        lower_strict, upper_strict = False, strict
    terms = []
    if lo is None and hi is None:
        return None
    if lo is not None:
        terms.append(field > lo if lower_strict else field >= lo)
    if hi is not None:
        terms.append(field < hi if upper_strict else field <= hi)
    expression = terms[0]
    for term in terms[1:]:
        expression = expression & term
    return expression


def _as_field_type(value: Any, kind: pa.DataType) -> pa.Scalar | None:
    """A decoded key bound as a scalar of the key field's Arrow type, or None (no bound).

    Key codecs decode to one Python type per family (a UTC-aware microsecond
    datetime, an int, a float, a str): compared as it is with a naive,
    zoned, second or nanosecond timestamp field (or ``timestamp < scalar``
    of another zone) Arrow refuses the expression. A bound the field's type
    cannot hold exactly is dropped: pruning is only an optimisation, and a
    looser bound never loses a row.
    """
    if value is None:
        return None
    try:
        scalar = pa.scalar(value)
        if scalar.type == kind:
            return scalar
        cast = scalar.cast(kind, safe=False)
        if cast.cast(scalar.type, safe=False) != scalar:
            return None
        return cast
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None


def table_dataset(table: Table) -> tuple[ds.Dataset, _TabletFiles]:
    """A lazy dataset over ``table`` (one fragment per tablet) and its file handler."""
    schema = _served(table, table._empty(None)).schema
    leaves: list[LeafSlice] = []
    if table.codec is not None and table.count:
        leaves = table._tree().plan(table.data_ref(), table.overlay(), 0, table.count)
    handler = _TabletFiles(table, leaves)
    filesystem = pafs.PyFileSystem(handler)
    paths = [f"tablet-{i}.arrow" for i in range(len(leaves))]
    kind = schema.field(table.key.fields[0]).type if leaves else pa.null()
    partitions = [_key_range(table, leaf, kind) for leaf in leaves]
    dataset = ds.FileSystemDataset.from_paths(
        paths,
        schema=schema,
        format=ds.IpcFileFormat(),
        filesystem=filesystem,
        partitions=[p if p is not None else ds.scalar(True) for p in partitions],
    )
    return dataset, handler
