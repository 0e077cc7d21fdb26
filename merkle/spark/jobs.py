"""A distributed write: the plan tasks get, what a task does, and the one commit.

The driver plans a :class:`WriteJob` (plain values: it pickles to every
task): the lake, the writer lease, the table version the write builds on
(its root CID, already in the lake) and the :class:`WriteGroup` key ranges.
Each task (:func:`run_groups`) rebuilds the groups whose rows it holds and
writes their tablets straight to the lake under the lease; it returns small
:class:`GroupResult` values, never rows. The driver (:func:`commit_job`)
splices the new tablets into the tree and commits once, with
compare-and-set; until then no version names the new blocks, so a failed or
cancelled job leaves the head as it was and only unreferenced blocks behind.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import StructType, VariantType

from merkle.blocks.cid import CID
from merkle.db.bulk import committed_table, lake_tables, replace_table, table_root
from merkle.db.connection import Connection
from merkle.db.database import Database
from merkle.errors import ConflictError, SchemaError, UsageError
from merkle.refs import Lease, LeaseExpiredError, WriterTicket
from merkle.spark.lake import hold_lease, open_lake, renewed_lease
from merkle.spark.options import LakeRef, WriteOptions
from merkle.spark.types import ENCODING, from_spark
from merkle.spark.zones import task_zone, zoned_like
from merkle.tablets.bulk import (
    RepeatedKeyError,
    TabletInfo,
    WriteGroup,
    encode_keys,
    key_column,
    merge_leaves,
    plan_merges,
    rewrite_group,
    route,
    splice,
)
from merkle.tablets.conform import codec_for_types
from merkle.tablets.fitcolumn import fit_column
from merkle.tablets.keys import key_codec
from merkle.tablets.segment import cbor_field, concat_segments
from merkle.tablets.table import Table

__all__ = [
    "GROUP",
    "MARKER",
    "ROUTING",
    "TAG",
    "Base",
    "GroupResult",
    "TableSettings",
    "WriteJob",
    "collect_leaves",
    "commit_job",
    "empty_rows",
    "fitted_keys",
    "has_table",
    "key_fields",
    "local_merges",
    "plan_base",
    "prepared",
    "routed_rows",
    "run_groups",
    "table_settings",
]

#: Columns the shuffle adds to the rows: the write group, and whether the row is a marker.
GROUP = "_merkle_group"
MARKER = "_merkle_marker"
#: Column holding a partition's tag for ``repartition`` (see merkle.spark.shuffle).
TAG = "_merkle_tag"
#: The routing columns, in the order they follow a routed batch's own columns. A task
#: reads them by position (:func:`routed_rows`), never by name: the rows' columns carry
#: the user's names, which may be any, these ones among them.
ROUTING = (GROUP, MARKER, TAG)
MODES = ("upsert", "replace", "delete")


@dataclass(frozen=True)
class TableSettings:
    """What creating the table at commit needs (the table did not exist when planned)."""

    key: tuple[str, ...]  # the key fields (several: a composite key)
    key_codec: str


@dataclass(frozen=True)
class WriteJob:
    lake: LakeRef
    lease: Lease
    lease_ttl: float
    db: str
    table: str
    base_version: int
    table_root: str  # CID string of the table version the groups were planned on
    based_on: str | None  # CID string of the committed root it replaces (None: a new table)
    groups: tuple[WriteGroup, ...]
    mode: str  # "upsert", "replace" (overwrite) or "delete"
    create: TableSettings | None = None
    cbor_fields: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()  # the rows' columns by position, named as written
    #: Spark's session time zone (None: as the tasks see it), for TIMESTAMP <-> TIMESTAMP_NTZ.
    time_zone: str | None = None

    def named(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` (a DataFrame's rows) with its first columns named :attr:`columns`."""
        given = batch.schema.names
        if not self.columns or tuple(given[: len(self.columns)]) == self.columns:
            return batch
        names = [*self.columns, *given[len(self.columns) :]]
        return batch.rename_columns(names)

    def zone(self) -> str:
        """The session time zone rows are converted in (:mod:`merkle.spark.zones`)."""
        return self.time_zone or task_zone() or "UTC"

    def open_table(self) -> Table:
        conn = open_lake(self.lake)
        return Table.load(lake_tables(conn, self.lease), CID.parse(self.table_root))


@dataclass(frozen=True)
class GroupResult:
    """What a task made of one group: its new tablets (None: unchanged)."""

    group: int
    tablets: tuple[TabletInfo, ...] | None
    rows: int
    pending: tuple[int, ...] = ()  # groups holding pending changes (as this task saw them)


def _pending_groups(job: WriteJob, table: Table) -> tuple[int, ...]:
    if not table.root.pending:
        return ()
    overlay = table.overlay()
    return tuple(g.index for g in job.groups if overlay.has_entries(g.lo, g.hi))


def routed_rows(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, np.ndarray, np.ndarray]:
    """A routed batch split into its own columns, each row's group and its marker flag.

    The routing columns (:data:`ROUTING`) are the batch's last ones and are read by
    position: the columns before them carry the DataFrame's names, which are taken as
    given (doc/spark.md), so a user column may itself be named ``_merkle_group`` or
    ``_merkle_tag``; reading or dropping by name would take the user's column instead.
    """
    count = batch.num_columns - len(ROUTING)
    ids = np.asarray(batch.column(count).to_numpy(zero_copy_only=False)).astype(np.int64)
    marker = np.asarray(batch.column(count + 1).to_numpy(zero_copy_only=False)).astype(bool)
    return batch.select(range(count)), ids, marker


def prepared(job: WriteJob, table: Table, rows: pa.Table) -> pa.Table:
    """Spark's rows as the table stores them, where Spark's conversion differs from the
    Python API's: TIMESTAMP <-> TIMESTAMP_NTZ by the session zone (:mod:`merkle.spark.zones`);
    the key columns fitted to the key fields' types (:func:`fitted_keys`)."""
    return fitted_keys(table, zoned_like(rows, table.schema, job.zone()))


def fitted_keys(table: Table, rows: pa.Table) -> pa.Table:
    """``rows`` with their key columns fitted to the key fields' types: a key value (or a
    key column's type) that does not fit is a SchemaError that names the row and the ways
    out a key field has (it cannot be declared schema-free), before the rows go further."""
    stored = table.schema
    for name in table.key.fields:
        if stored is None or name not in stored.names or name not in rows.column_names:
            continue
        kind = stored.field(name).type
        if pa.types.is_null(kind):
            continue
        index = rows.column_names.index(name)
        column = fit_column(name, rows.column(index), kind, lambda i: i, key_field=True)
        rows = rows.set_column(index, rows.schema.field(name).with_type(column.type), column)
    return rows


def run_groups(
    job: WriteJob,
    batches: Iterable[pa.RecordBatch],
    *,
    routed: bool,
) -> list[GroupResult]:
    """Rebuild the groups of the given rows (a task's share of the write).

    ``routed``: each batch ends with the :data:`ROUTING` columns (read by
    position, see :func:`routed_rows`): the rows' groups, and marker rows (no
    data) naming groups to visit even without rows; otherwise each row's group
    is found from its key.
    """
    with hold_lease(job.lake, job.lease, job.lease_ttl), _naming(job.table):
        table = job.open_table()
        starts = [g.lo for g in job.groups[1:] if g.lo is not None]
        parts: list[pa.Table] = []
        id_parts: list[np.ndarray] = []
        visit: set[int] = set()
        for batch in batches:
            if not batch.num_rows:
                continue
            if routed:
                data, ids, marker = routed_rows(batch)
                visit.update(int(i) for i in ids[marker])
                data = data.filter(pa.array(~marker)) if marker.any() else data
                ids = ids[~marker]
                if not data.num_rows:
                    continue
                rows = prepared(job, table, from_spark(data, job.cbor_fields))
            else:
                rows = prepared(job, table, from_spark(job.named(batch), job.cbor_fields))
                ids = route(encode_keys(table, rows), starts)
            parts.append(rows)
            id_parts.append(ids)
        first_key = table.key.fields[0]  # a column every part holds, without nulls
        empty = pa.table({first_key: pa.array([], type=pa.null())})
        rows = (
            parts[0]
            if len(parts) == 1
            else (concat_segments(parts, key_field=first_key) if parts else empty)
        )
        ids = np.concatenate(id_parts) if id_parts else np.zeros(0, dtype=np.int64)
        if len(ids) and not (ids == ids[0]).all():  # one group (a bulk load): no reordering
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
            rows = rows.take(pa.array(order))
        cuts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, int)
        bounds = [*map(int, cuts), len(ids)]
        spans = {int(ids[a]): (a, b) for a, b in itertools.pairwise(bounds)}
        pending = _pending_groups(job, table)
        results = []
        for index in sorted(set(spans) | visit):
            a, b = spans.get(index, (0, 0))
            part = rows.slice(a, b - a) if b > a else empty
            results.append(_rebuild(job, table, job.groups[index], part, pending))
        return results


@contextlib.contextmanager
def _naming(table: str) -> Iterator[None]:
    """A SchemaError raised within names ``table``, as the Python API's do."""
    try:
        yield
    except SchemaError as exc:
        if str(exc).startswith("table "):
            raise
        raise SchemaError(f"table {table!r}: {exc}") from None


def _rebuild(
    job: WriteJob, table: Table, group: WriteGroup, rows: pa.Table, pending: tuple[int, ...]
) -> GroupResult:
    given = rows if rows.num_rows else None
    if job.mode == "delete":
        deletes = key_column(table, rows) if rows.num_rows else None
        made = rewrite_group(table, group, deletes=deletes)
    else:
        try:
            made = rewrite_group(
                table, group, upserts=given, replace=job.mode == "replace", unique=True
            )
        except RepeatedKeyError as exc:
            # The Python API keeps the last row written for a key, in an order its caller
            # gives; Spark promises a DataFrame's rows no order (a.union(b) or a
            # repartition may put either last), so which would be stored is not defined,
            # as Delta Lake's MERGE refuses several source rows for one target row.
            fields = ", ".join(repr(field) for field in table.key.fields)
            raise UsageError(
                f"the rows to write into table {job.table!r} hold key {exc.key!r} more than "
                "once: Spark gives a DataFrame's rows no order, so which of them would be "
                f"stored is not defined; drop the duplicates first (df.dropDuplicates([{fields}]))"
                ", keeping the row you mean"
            ) from None
    return GroupResult(group.index, None if made is None else tuple(made), rows.num_rows, pending)


def collect_leaves(
    job: WriteJob, results: Sequence[GroupResult]
) -> tuple[list[TabletInfo], set[str]]:
    """The table's tablets after the write, in key order, and the CIDs of the new ones.

    UsageError if two tasks rebuilt one group, or if a group holding pending
    changes was not rebuilt (both only happen when the rows were not routed
    to groups first, as ``df.write.format("merkle")`` cannot do).
    """
    done: dict[int, GroupResult] = {}
    pending: set[int] = set()
    for result in results:
        pending.update(result.pending)
        if result.group in done and job.mode == "replace":
            done[result.group] = _runs(job, done[result.group], result)
            continue
        if result.group in done:
            group = job.groups[result.group]
            raise UsageError(
                f"two Spark partitions hold rows of one tablet's key range (group {group.index}) "
                f"of table {job.table!r}; each partition must own whole tablets: write with "
                "merkle.spark.write(df, ...), which routes rows to tablets first"
            )
        done[result.group] = result
    missed = sorted(i for i in pending if i not in done)
    if missed and job.mode != "replace":
        raise UsageError(
            f"table {job.table!r} has pending changes in key ranges no Spark partition wrote "
            f"(groups {missed[:5]}); write with merkle.spark.write(df, ...), which folds them in"
        )
    leaves: list[TabletInfo] = []
    fresh: set[str] = set()
    for group in job.groups:
        found = done.get(group.index)
        if found is None or found.tablets is None:
            if group.tablet is not None and job.mode != "replace":
                leaves.append(group.tablet)
        else:
            leaves.extend(found.tablets)
            fresh.update(t.cid for t in found.tablets)
    return leaves, fresh


def _runs(job: WriteJob, a: GroupResult, b: GroupResult) -> GroupResult:
    """Two tasks' sorted runs of one group, as one result (UsageError if they overlap)."""
    tablets = sorted([*(a.tablets or ()), *(b.tablets or ())], key=lambda t: t.first_key)
    for before, after in itertools.pairwise(tablets):
        if after.first_key <= before.last_key:
            raise UsageError(
                f"Spark partitions of the DataFrame written to table {job.table!r} overlap in "
                "key range, so their rows cannot become one table without a second stage: "
                "write with merkle.spark.write(df, ...), or repartitionByRange on the key first"
            )
    return GroupResult(a.group, tuple(tablets), a.rows + b.rows, a.pending)


MergeRunner = Callable[[WriteJob, list[list[TabletInfo]]], list[list[TabletInfo]]]


def local_merges(job: WriteJob, spans: list[list[TabletInfo]]) -> list[list[TabletInfo]]:
    """Merge underfull tablets here (the data source's commit has no Spark to run them)."""
    table = job.open_table()
    return [merge_leaves(table, span) for span in spans]


def commit_job(
    job: WriteJob,
    results: Sequence[GroupResult],
    *,
    message: str | None,
    author: str | None,
    merges: MergeRunner = local_merges,
) -> Database:
    """Build the new table from the tasks' tablets and commit it once (compare-and-set).

    Underfull new tablets are merged with a neighbour first (``merges`` runs
    them; by default here). On a moved head the write replays if its table
    is unchanged there, and is a ConflictError naming both versions if not.
    Returns the committed database (the head, unchanged, for a no-op).
    """
    conn = open_lake(job.lake)
    base = job.open_table()
    leaves, fresh = collect_leaves(job, results)
    spans = plan_merges(base, leaves, fresh)
    if spans:
        merged = merges(job, [leaves[a:b] for a, b in spans])
        for (a, b), new in sorted(zip(spans, merged, strict=True), reverse=True):
            leaves[a:b] = new
            fresh.update(t.cid for t in new)
    changed = bool(fresh) or job.mode == "replace" or any(r.tablets is not None for r in results)
    built = splice(base, leaves, fresh=fresh, replace=job.mode == "replace")
    db = conn.open_db(job.db)
    if job.create is not None:
        if job.table in db.list_tables():
            raise ConflictError(
                f"table {job.table!r} of database {job.db!r} was created by another writer "
                f"after version {job.base_version}, which this bulk write read (now at "
                f"version {db.version}); its tablets were not committed: run it again"
            )
        key = job.create.key[0] if len(job.create.key) == 1 else list(job.create.key)
        db = db.create_table(job.table, key=key, key_codec=job.create.key_codec)
    elif not changed:
        return db
    db = replace_table(
        db,
        job.table,
        built,
        based_on=job.based_on,
        base_version=job.base_version,
        made=sorted(fresh),
    )
    # The tasks wrote under this lease: the commit lands under it too, and settles with
    # the GC lock generation the lease began under (merkle.refs.writer).
    ticket = WriterTicket(
        job.lease,
        job.lease.gc_generation,
        renewed=lambda: conn.leases.current(renewed_lease(job.lease)),
    )
    try:
        return db.commit(message=message, author=author, ticket=ticket)
    except LeaseExpiredError as exc:  # nothing was put: the tasks' blocks may be gone
        raise LeaseExpiredError(
            f"the write to table {job.table!r} of database {job.db!r} lost its writer lease "
            f"before its commit ({exc}): nobody renewed it for {job.lease_ttl:g}s (the driver "
            "stalled?), so garbage collection may have removed the tablets its tasks wrote; "
            "nothing was committed: run the write again"
        ) from None


@dataclass(frozen=True)
class Base:
    """The table a write builds on: its value, its root in the lake, the root it replaces."""

    table: Table
    root: str  # CID string tasks load the table from
    based_on: str | None  # CID string of the committed root (None: created by the write)


def plan_base(
    conn: Connection,
    db: Database,
    table: str,
    lease: Lease,
    create: TableSettings | None,
    schema: StructType,
) -> Base:
    """The table a write of rows of ``schema`` builds on, bound to the lake under ``lease``.

    The table is first made ready for those columns, once, here: a key codec
    if it has none, and (a typed table) the DataFrame's new fields added to
    its schema, so that every task conforms its rows to one schema. If that
    changed the table (or it is to be created), the result is stored under
    the lease, so that tasks can load it like any other table.
    """
    tables = lake_tables(conn, lease)
    if create is None:
        committed: str | None = table_root(db, table)
        current = Table(tables, committed_table(db, table).root)
    else:
        committed = None
        key = create.key[0] if len(create.key) == 1 else create.key
        current = Table.new(tables, key_field=key, key_codec=create.key_codec, typed=True)
    ready, _ = current.prepare_rows(fitted_keys(current, empty_rows(schema)))
    if committed is not None and ready.root == current.root:
        return Base(current, committed, committed)
    return Base(ready, str(ready.save()), committed)


def empty_rows(schema: StructType) -> pa.Table:
    """No rows, with the Arrow types of Spark's ``schema`` (VARIANT and CBOR fields schema-free)."""
    arrow = to_arrow_schema(schema, timezone="UTC")
    fields = []
    for spark_field, field in zip(schema, arrow, strict=True):
        mixed = isinstance(spark_field.dataType, VariantType) or (
            spark_field.metadata.get(ENCODING) == "cbor"
        )
        fields.append(cbor_field(field.name) if mixed else field)
    return pa.schema(fields).empty_table()


def has_table(db: Database, table: str) -> bool:
    return table in db.list_tables()


def key_fields(option: str) -> tuple[str, ...]:
    """The key fields the ``key`` option names: one, or several separated by commas
    (spaces around each name are not part of it, whether the table is made or exists)."""
    return tuple(name.strip() for name in option.split(","))


def table_settings(
    opts: WriteOptions, schema: StructType, existing_key: Sequence[str] | None
) -> TableSettings | None:
    """The settings of a table the write creates (None: it exists), checked against ``schema``."""
    names = schema.fieldNames()
    if existing_key is not None:
        shown = existing_key[0] if len(existing_key) == 1 else list(existing_key)
        if opts.key is not None and key_fields(opts.key) != tuple(existing_key):
            raise UsageError(
                f"table {opts.table!r} is keyed by {shown!r}, not by {opts.key!r}: "
                "drop the key option or write to another table"
            )
        for field in existing_key:
            if field not in names:
                raise UsageError(
                    f"the DataFrame has no column {field!r}, a key field of table "
                    f"{opts.table!r} (its columns: {', '.join(names)})"
                )
        return None
    if not opts.key:
        raise UsageError(
            f"table {opts.table!r} does not exist in database {opts.db!r}: pass the option "
            '"key" (the key field, or several separated by commas) to create it'
        )
    fields = key_fields(opts.key)
    for field in fields:
        if field not in names:
            raise UsageError(
                f"the key field {field!r} is not a column of the DataFrame (its columns: "
                f"{', '.join(names)})"
            )
    if opts.key_codec is not None:
        codec = key_codec(opts.key_codec)
    else:
        codec = codec_for_types(
            [to_arrow_type(schema[field].dataType, timezone="UTC") for field in fields]
        )
    return TableSettings(fields, codec.spec)
