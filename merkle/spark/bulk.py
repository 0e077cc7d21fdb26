"""``merkle.spark.write`` and ``merkle.spark.delete``: route rows to tablets, then write.

Works for any DataFrame, however it is partitioned, in three Spark stages
whose data never passes through the driver:

1. *Sample*: every task counts its rows per write group (a stored tablet's
   key range, or a gap between tablets) and keeps a bottom-k sample of the
   keys in each gap. The driver splits gaps that received many rows (a bulk
   load is one big gap) at the sample's quantiles, so new rows spread over
   many tasks, and packs groups into partitions of about ``rows_per_task``.
2. *Route and write*: each row gets its group and its partition's tag, and
   ``repartition`` sends every group whole to the one task planned for it;
   the task merges the group's stored tablet, the pending changes in its
   range and the new rows (or deletes), and writes the tablets to the lake.
   If the table has pending changes, one marker row per group makes sure
   every group with pending changes is visited, so they are folded in.
3. *Merge*: the few tablets left below the fill minimum are merged with a
   neighbour in small tasks.

The driver then builds the index over the new tablets (reusing every
untouched tablet and subtree) and commits once with compare-and-set, all
under one writer lease taken before the first block is written.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import itertools
import math
import pickle
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.functions import col, collate
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from merkle.db.bulk import committed_table
from merkle.db.database import Database
from merkle.errors import UsageError
from merkle.spark.casing import case_sensitive
from merkle.spark.failures import raised_as_merkle_errors
from merkle.spark.jobs import (
    GROUP,
    MARKER,
    ROUTING,
    TAG,
    GroupResult,
    WriteJob,
    commit_job,
    prepared,
    run_groups,
)
from merkle.spark.lake import hold_lease, open_lake
from merkle.spark.options import DRIVER_LEASE_TTL, WriteOptions, lake_ref, lease_ttl_seconds
from merkle.spark.planning import start_job
from merkle.spark.shuffle import pack_groups, partition_tags
from merkle.spark.zones import session_zone
from merkle.tablets.bulk import TabletInfo, WriteGroup, encode_keys, merge_leaves, route
from merkle.tablets.keys import infer_key_codec_arrow
from merkle.tablets.table import Table

__all__ = ["delete", "write"]

SAMPLE = 2048  # keys a gap's sample keeps (bottom-k by a random priority)
_STATS = StructType(
    [
        StructField("group", LongType()),
        StructField("rows", LongType()),
        StructField("key", BinaryType()),
        StructField("priority", DoubleType()),
    ]
)
_RESULTS = StructType([StructField("results", BinaryType())])


def write(
    df: DataFrame,
    lake: str,
    db: str,
    table: str,
    key: str | None = None,
    message: str | None = None,
    author: str | None = None,
    *,
    mode: str = "append",
    key_codec: str | None = None,
    rows_per_task: int | None = None,
    lease_ttl: float | None = None,
    **options: Any,
) -> Database:
    """Upsert ``df``'s rows into ``table`` by key (``mode="overwrite"``: replace its rows).

    ``key`` names the key field when the table does not exist yet (it is
    created); ``options`` are store options (``endpoint_url=...``). Returns
    the committed database. See the module doc for how it runs.
    ``lease_ttl``: seconds the job's writer lease outlives its last renewal
    (default :data:`~merkle.spark.options.DRIVER_LEASE_TTL`, an ordinary writer's).
    """
    if mode.lower() not in ("append", "overwrite"):  # any case, as Spark's own modes
        raise UsageError(f"mode must be 'append' or 'overwrite', got {mode!r}")
    ttl = DRIVER_LEASE_TTL if lease_ttl is None else lease_ttl_seconds(lease_ttl, "argument")
    opts = WriteOptions(lake_ref(lake, options), db, table, key, key_codec, message, author, ttl)
    with raised_as_merkle_errors():
        return _run(df, opts, "replace" if mode.lower() == "overwrite" else "upsert", rows_per_task)


def delete(
    spark: SparkSession,
    lake: str,
    db: str,
    table: str,
    keys_df: DataFrame,
    message: str | None = None,
    author: str | None = None,
    *,
    rows_per_task: int | None = None,
    lease_ttl: float | None = None,
    **options: Any,
) -> Database:
    """Delete the records whose keys ``keys_df`` holds (its key-named column, or its only one)."""
    ttl = DRIVER_LEASE_TTL if lease_ttl is None else lease_ttl_seconds(lease_ttl, "argument")
    opts = WriteOptions(lake_ref(lake, options), db, table, None, None, message, author, ttl)
    conn = open_lake(opts.lake)
    stored = committed_table(conn.open_db(db), table)
    fields = list(stored.key.fields)
    names = keys_df.columns
    folded = {n.casefold() for n in names} if not case_sensitive(spark) else set()
    if all(field in names or field.casefold() in folded for field in fields):
        keys_df = keys_df.select(*[col(_quoted(field)) for field in fields])
    elif len(fields) == 1 and len(names) == 1:
        keys_df = keys_df.toDF(fields[0])  # by position: Spark parses no name
    else:
        raise UsageError(
            f"the keys DataFrame needs the key field(s) {fields} of table {table!r} as "
            f"columns (or, for a one-field key, a single column); it has {names}"
        )
    if stored.codec is None:
        return conn.open_db(db)  # never written: nothing to delete
    with raised_as_merkle_errors():
        return _run(keys_df, opts, "delete", rows_per_task)


def _run(df: DataFrame, opts: WriteOptions, mode: str, rows_per_task: int | None) -> Database:
    spark = df.sparkSession
    with contextlib.ExitStack() as held:  # the writer lease: kept renewed here, then released
        job, base = start_job(
            opts,
            df.schema,
            mode,
            case_sensitive=case_sensitive(spark),
            time_zone=session_zone(spark),
            keep=held,
        )
        names = job.columns  # the DataFrame's columns, spelled as the table's fields
        plain = _plain(df)
        limit = base.table.spec.limits.tablet_size
        parallelism = max(1, spark.sparkContext.defaultParallelism)
        key = base.table.key.fields
        results = None
        if (
            job.mode == "replace"
            and len(key) == 1
            and _ordered_like_spark(
                base.table,
                to_arrow_type(df.schema.fields[names.index(key[0])].dataType, timezone="UTC"),
            )
        ):
            partitions = max(2 * parallelism, df.rdd.getNumPartitions())
            order = _range_column(plain, names.index(key[0]))
            results = _write_ranged(plain, names, job, order, partitions)
            if _overlapping(results):
                results = None  # Spark's order was not the codec's: route the rows instead
        if results is None:
            if job.mode == "delete":
                rows = [0] * len(job.groups)
            else:
                rows, samples = _sample(plain, names, job)
                new = sum(rows)
                per_task = max(1, min(10, math.ceil(new / (limit * 2 * parallelism))))
                job, rows = _split(job, rows, samples, rows_per_task or per_task * limit)
            weights = _weights(job, rows)
            per_task = max(1, min(10, math.ceil(sum(weights) / (limit * 2 * parallelism))))
            markers = bool(base.table.root.pending) and job.mode != "replace"
            target = rows_per_task or per_task * limit
            results = _write(plain, names, job, weights, target, markers)
        return commit_job(
            job,
            results,
            message=opts.message,
            author=opts.author,
            merges=functools.partial(_spark_merges, spark),
        )


def _weights(job: WriteJob, rows: list[int]) -> list[int]:
    """The work of each group: its new rows, and its stored tablet's rows if it has new ones."""
    return [
        count + (g.tablet.count if g.tablet is not None and count else 0) + 1
        for g, count in zip(job.groups, rows, strict=True)
    ]


# -- column names Spark does not parse ----------------------------------------------


def _quoted(name: str) -> str:
    """``name`` as a Spark column reference to exactly that column (``a.b`` is no struct path)."""
    return "`" + name.replace("`", "``") + "`"


def _plain_name(position: int) -> str:
    return f"_merkle_c{position}"


def _plain(df: DataFrame) -> DataFrame:
    """``df`` with its columns renamed by position to names Spark never parses as a path.

    pyspark's ``mapInArrow`` passes every column to the UDF as ``df[name]``,
    which Spark parses: a column named ``a.b`` is read as field ``b`` of a
    struct ``a`` and fails with UNRESOLVED_COLUMN. ``toDF`` renames by
    position (types and metadata kept); the tasks give the rows their names
    back with :func:`_named` before merkle-db sees them.
    """
    return df.toDF(*[_plain_name(i) for i in range(len(df.columns))])


def _keys(job: WriteJob, table: Table, batch: pa.RecordBatch, names: tuple[str, ...]) -> Any:
    """The encoded keys of ``batch``, prepared as the task that writes them prepares its
    rows (:func:`merkle.spark.jobs.prepared`: a TIMESTAMP key into a TIMESTAMP_NTZ key
    field by the session zone), so that rows are routed by the keys they are stored under."""
    return encode_keys(table, prepared(job, table, pa.Table.from_batches([_named(batch, names)])))


def _named(batch: pa.RecordBatch, names: tuple[str, ...]) -> pa.RecordBatch:
    """A batch of :func:`_plain` rows with the DataFrame's column names (later columns kept)."""
    given = [*names, *batch.schema.names[len(names) :]]
    schema = pa.schema(
        [f.with_name(n) for f, n in zip(batch.schema, given, strict=True)],
        metadata=batch.schema.metadata,
    )
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


# -- a bulk load: Spark's own range partitioning --------------------------------------

#: Key codecs whose order is Spark's order of the key column (or its reverse).
_SPARK_ORDERED = ("int", "float", "str", "bytes", "timestamp")


def _ordered_like_spark(table: Table, key_type: pa.DataType) -> bool:
    """Whether Spark's range partitioning on the key column (see :func:`_range_column`)
    cuts the table's key order."""
    spec = table.spec.codec.spec
    inner = spec[len("reverse(") : -1] if spec.startswith("reverse(") else spec
    return inner in _SPARK_ORDERED and infer_key_codec_arrow(key_type).spec == inner


def _range_column(df: DataFrame, position: int) -> Column:
    """The key column to range-partition on, a collated string cast to binary collation.

    A collated string (``k COLLATE UTF8_LCASE``, ``UNICODE_CI``...) sorts in
    its collation's order, not in the UTF-8 byte order of the ``str`` codec:
    range partitions cut on it interleave in key order. The rows keep their
    type and values; only the partitioning compares bytes.
    """
    field = df.schema.fields[position]
    column = col(_quoted(field.name))
    if isinstance(field.dataType, StringType) and not field.dataType.isUTF8BinaryCollation():
        column = collate(column, "UTF8_BINARY")
    return column


def _write_ranged(
    df: DataFrame, names: tuple[str, ...], job: WriteJob, order: Column, partitions: int
) -> list[GroupResult]:
    """A bulk load: ``repartitionByRange`` on the key, each task writes its range's tablets.

    Spark samples the keys itself (in the JVM) and sends each row once; the
    ranges are disjoint in the table's key order, so the tasks' sorted runs
    stack into one tree (:func:`_overlapping` checks that they do).
    """
    ranged = df.repartitionByRange(partitions, order)
    task = functools.partial(_write_task, job, False, names)
    found = ranged.mapInArrow(task, _RESULTS).collect()
    return [result for row in found for result in pickle.loads(row["results"])]


def _overlapping(results: list[GroupResult]) -> bool:
    """Whether the tasks' sorted runs overlap in key range (they cannot stack into one tree).

    Only when Spark ordered the key column otherwise than its codec, which
    :func:`_ordered_like_spark` is there to rule out; the write then routes
    the rows (its tablets written so far are left unreferenced, for gc).
    """
    tablets = sorted(
        (t for r in results for t in r.tablets or ()), key=lambda t: (t.first_key, t.last_key)
    )
    return any(b.first_key <= a.last_key for a, b in itertools.pairwise(tablets))


# -- stage 1: sample ----------------------------------------------------------------


def _sample_task(
    job: WriteJob, names: tuple[str, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    table = job.open_table()
    starts = [g.lo for g in job.groups[1:] if g.lo is not None]
    splittable = np.array([g.tablet is None for g in job.groups])
    counts = np.zeros(len(job.groups), dtype=np.int64)
    kept: dict[int, list[tuple[float, bytes]]] = {}
    rng = np.random.default_rng()
    for batch in batches:
        if not batch.num_rows:
            continue
        keys = _keys(job, table, batch, names)
        ids = route(keys, starts)
        counts += np.bincount(ids, minlength=len(counts))
        priority = rng.random(len(ids))
        for g in np.unique(ids[splittable[ids]]):
            rows = np.flatnonzero(ids == g)
            if len(rows) > SAMPLE:  # a bottom-k sample: the SAMPLE smallest priorities
                rows = rows[np.argpartition(priority[rows], SAMPLE)[:SAMPLE]]
            chosen = keys.take(pa.array(rows)).to_pylist()
            pool = kept.setdefault(int(g), [])
            pool.extend(zip(priority[rows].tolist(), chosen, strict=True))
            if len(pool) > 2 * SAMPLE:
                kept[int(g)] = heapq.nsmallest(SAMPLE, pool)
    groups: list[int] = []
    rows_out: list[int] = []
    keys_out: list[bytes | None] = []
    prios: list[float | None] = []
    for g in np.flatnonzero(counts):
        groups.append(int(g))
        rows_out.append(int(counts[g]))
        keys_out.append(None)
        prios.append(None)
    for g, pool in kept.items():
        for prio, key in heapq.nsmallest(SAMPLE, pool):
            groups.append(g)
            rows_out.append(0)
            keys_out.append(key)
            prios.append(prio)
    yield pa.RecordBatch.from_arrays(
        [
            pa.array(groups, pa.int64()),
            pa.array(rows_out, pa.int64()),
            pa.array(keys_out, pa.binary()),
            pa.array(prios, pa.float64()),
        ],
        names=["group", "rows", "key", "priority"],
    )


def _sample(
    df: DataFrame, names: tuple[str, ...], job: WriteJob
) -> tuple[list[int], dict[int, list[bytes]]]:
    """Rows per group, and a uniform sample of the keys of each gap group (sorted)."""
    found = df.mapInArrow(functools.partial(_sample_task, job, names), _STATS).collect()
    rows = [0] * len(job.groups)
    picked: dict[int, list[tuple[float, bytes]]] = {}
    for row in found:
        if row["key"] is None:
            rows[row["group"]] += row["rows"]
        else:
            picked.setdefault(row["group"], []).append((row["priority"], bytes(row["key"])))
    samples = {
        g: sorted(k for _, k in heapq.nsmallest(SAMPLE, items)) for g, items in picked.items()
    }
    return rows, samples


def _split(
    job: WriteJob, rows: list[int], samples: dict[int, list[bytes]], target: int
) -> tuple[WriteJob, list[int]]:
    """Gap groups with more than ``target`` rows cut at their sample's quantiles."""
    groups: list[WriteGroup] = []
    counts: list[int] = []
    for group, count in zip(job.groups, rows, strict=True):
        sample = samples.get(group.index, [])
        pieces = math.ceil(count / target) if group.tablet is None and count > target else 1
        cuts: list[bytes] = []
        if pieces > 1 and sample:
            for i in range(1, pieces):
                cut = sample[i * len(sample) // pieces]
                inside = (group.lo is None or cut > group.lo) and (
                    group.hi is None or cut < group.hi
                )
                if inside and (not cuts or cut > cuts[-1]):
                    cuts.append(cut)
        bounds = [group.lo, *cuts, group.hi]
        share = count // (len(bounds) - 1)
        for lo, hi in itertools.pairwise(bounds):
            groups.append(WriteGroup(len(groups), lo, hi, group.tablet))
            counts.append(share if len(bounds) > 2 else count)
    return replace(job, groups=tuple(groups)), counts


# -- stage 2: route and write -------------------------------------------------------


def _route_task(
    job: WriteJob,
    names: tuple[str, ...],
    part_of: list[int],
    tags: list[int],
    markers: pa.Schema | None,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """Each row with its group and tag; in partition 0, one marker row per group after them.

    The marker rows take the schema of the task's data batches: every batch
    of a task's output must have one schema, and the Arrow types Spark sends
    depend on session settings (``large_string`` under
    ``spark.sql.execution.arrow.useLargeVarTypes``). ``markers`` (the same
    settings, read on the driver) serves a task that got no rows.
    """
    from pyspark import TaskContext

    table = job.open_table()
    starts = [g.lo for g in job.groups[1:] if g.lo is not None]
    tag_of = np.array([tags[p] for p in part_of], dtype=np.int64)
    seen: pa.Schema | None = None
    for batch in batches:
        if not batch.num_rows:
            continue
        seen = _nullable(batch.schema)
        ids = route(_keys(job, table, batch, names), starts)
        yield _with_columns(batch, ids, np.zeros(len(ids), bool), tag_of[ids])
    context = TaskContext.get()
    if markers is not None and context is not None and context.partitionId() == 0:
        # One row per group, with no data: every group gets visited (pending changes).
        ids = np.arange(len(job.groups), dtype=np.int64)
        schema = seen or markers
        empty = pa.RecordBatch.from_arrays(
            [pa.nulls(len(ids), f.type) for f in schema], schema=schema
        )
        yield _with_columns(empty, ids, np.ones(len(ids), bool), tag_of[ids])


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def _with_columns(
    batch: pa.RecordBatch, ids: np.ndarray, marker: np.ndarray, tags: np.ndarray
) -> pa.RecordBatch:
    """``batch`` followed by the routing columns, in :data:`ROUTING`'s order (the write
    task reads them by position: :func:`merkle.spark.jobs.routed_rows`)."""
    arrays = [*batch.columns, pa.array(ids), pa.array(marker), pa.array(tags)]
    types = {GROUP: pa.int64(), MARKER: pa.bool_(), TAG: pa.int64()}
    fields = [*_nullable(batch.schema), *(pa.field(name, types[name]) for name in ROUTING)]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _write_task(
    job: WriteJob, routed: bool, names: tuple[str, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Write the task's groups. The rows get the DataFrame's names back; routed rows'
    :data:`ROUTING` columns after them keep theirs, which a user column may share (they
    are read by position)."""
    results = run_groups(job, (_named(batch, names) for batch in batches), routed=routed)
    yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(results)], pa.binary())], ["results"])


def _write(
    df: DataFrame,
    names: tuple[str, ...],
    job: WriteJob,
    weights: list[int],
    target: int,
    markers: bool,
) -> list[GroupResult]:
    part_of = pack_groups(weights, target)
    partitions = max(part_of) + 1 if part_of else 1
    tags = partition_tags(partitions)
    kinds = {GROUP: LongType(), MARKER: BooleanType(), TAG: LongType()}
    routed_schema = StructType(
        [StructField(f.name, f.dataType, True, f.metadata) for f in df.schema]
        + [StructField(name, kinds[name]) for name in ROUTING]
    )
    marker_schema = None
    if markers:
        conf = df.sparkSession.conf
        zone = conf.get("spark.sql.session.timeZone") or "UTC"
        large = conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") or "false"
        marker_schema = _nullable(
            to_arrow_schema(
                df.schema, timezone=zone, prefers_large_types=large.strip().lower() == "true"
            )
        )
    route_fn = functools.partial(_route_task, job, names, part_of, tags, marker_schema)
    routed = df.mapInArrow(route_fn, routed_schema).repartition(partitions, col(TAG))
    task = functools.partial(_write_task, job, True, names)
    found = routed.mapInArrow(task, _RESULTS).collect()
    return [result for row in found for result in pickle.loads(row["results"])]


# -- stage 3: merge underfull tablets -----------------------------------------------


def _merge_task(job: WriteJob, span: list[TabletInfo]) -> list[TabletInfo]:
    with hold_lease(job.lake, job.lease, job.lease_ttl):
        return merge_leaves(job.open_table(), span)


def _spark_merges(
    spark: SparkSession, job: WriteJob, spans: list[list[TabletInfo]]
) -> list[list[TabletInfo]]:
    rdd = spark.sparkContext.parallelize(spans, len(spans))
    return rdd.map(functools.partial(_merge_task, job)).collect()
