"""The ``merkle`` Spark data source: ``spark.read.format("merkle")`` and its reader.

Reading a table is planned where Spark plans the query, from the table's
index alone: the version is resolved once (when ``load()`` builds the
DataFrame, so every query on it sees one snapshot), a reader lease is taken
for that version, and one input partition is made per tablet (adjacent small
tablets grouped up to ``partition_bytes``; see
:func:`merkle.tablets.bulk.plan_reads` for why every key, pending ones
included, is read exactly once). Executors open the lake from its URI, read
and verify the blocks of their tablets, and yield Arrow record batches;
the driver never holds table data.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from merkle.blocks.cid import CID
from merkle.db.bulk import committed_table, table_root
from merkle.errors import NotFoundError, UsageError
from merkle.refs import Lease, LeaseManager
from merkle.spark.filters import key_filters, pk_bounds
from merkle.spark.lake import hold_lease, open_lake
from merkle.spark.options import (
    MIN_PARTITION_BYTES,
    LakeRef,
    ReadOptions,
    parse_key,
    read_options,
)
from merkle.spark.types import RowConverter, check_schema, spark_schema
from merkle.tablets.bulk import Slice, arrow_schema, plan_reads, read_slices
from merkle.tablets.keys import key_codec
from merkle.tablets.ranges import KeyRanges
from merkle.tablets.table import Table

__all__ = ["FILTERS_SCOPED_PER_SCAN", "MerkleDataSource", "MerklePartition", "MerkleReader"]


@dataclass(frozen=True)
class _Resolved:
    """One table version, resolved on the driver: plain values only."""

    version: int
    db_root: str
    table_root: str
    key_fields: tuple[str, ...]
    key_codec: str
    arrow: pa.Schema
    schema_json: str
    #: Fields Spark cannot represent, left out of ``schema_json``: name -> why.
    unreadable: tuple[tuple[str, str], ...] = ()


#: Whether pyspark keeps what ``pushFilters`` did to a reader within one scan. Through
#: pyspark 4.3 it does not: the first scan whose filters a Python data source takes
#: stores its planned read (the pruned reader and partitions) on the data source
#: object that every later scan of the same DataFrame shares, so after
#: ``df.where("id < 10").count()`` a plain ``df.count()``, ``df.write`` or
#: ``merkle.spark.write(df)`` saw only those rows (apache/spark's PythonScanBuilder
#: now keeps the read per scan; no release has it yet). Until one does, no filter
#: is taken: Spark evaluates them after a full read, and the ``from_pk``/``to_pk``
#: options (fixed per DataFrame) prune tablets instead.
FILTERS_SCOPED_PER_SCAN = False


class MerklePartition(InputPartition):
    """The tablets (slices) one Spark task reads."""

    def __init__(self, slices: Sequence[Slice]) -> None:
        super().__init__(tuple(slices))
        self.slices = tuple(slices)


def _resolve(read: ReadOptions) -> _Resolved:
    conn = open_lake(read.lake)
    db = conn.open_db(read.db, version=read.version, at=read.at, tag=read.tag)
    table = committed_table(db, read.table)
    if table.codec is None:
        raise UsageError(
            f"table {read.table!r} of database {read.db!r} has never been written, so it has "
            "no key type and no fields yet: write to it first"
        )
    arrow = arrow_schema(table)
    keys = table.key.fields
    schema, unreadable = spark_schema(arrow, key_fields=keys, mixed=read.mixed, table=read.table)
    if read.fields is not None:
        wanted = [
            _field(schema, name, read.table, unreadable) for name in read.fields if name not in keys
        ]
        schema = StructType([*(schema[key] for key in keys), *wanted])
        unreadable = {}
    return _Resolved(
        db.version,
        db.root,
        table_root(db, read.table),
        keys,
        table.codec.spec,
        arrow,
        schema.json(),
        tuple(unreadable.items()),
    )


def _field(schema: StructType, name: str, table: str, unreadable: dict[str, str]) -> Any:
    if name in unreadable:
        raise UsageError(unreadable[name] + ": leave it out of option 'fields'")
    if name not in schema.fieldNames():
        raise UsageError(
            f"option 'fields' names {name!r}, which table {table!r} does not hold "
            f"(its fields: {', '.join(schema.fieldNames())})"
        )
    return schema[name]


class MerkleDataSource(DataSource):
    """``format("merkle")``: read a table version, or write a DataFrame into a table."""

    _resolved: _Resolved | None = None

    @classmethod
    def name(cls) -> str:
        return "merkle"

    def schema(self) -> StructType:
        resolved = _resolve(read_options(self.options))
        if resolved.unreadable:  # the whole table is asked for
            raise UsageError(
                resolved.unreadable[0][1] + ": read the other fields with option 'fields' "
                "or a schema of your own that leaves it out"
            )
        self._resolved = resolved
        return StructType.fromJson(_loads(resolved.schema_json))

    def reader(self, schema: StructType) -> DataSourceReader:
        read = read_options(self.options)
        resolved = self._resolved or _resolve(read)
        stored = StructType.fromJson(_loads(resolved.schema_json))
        if schema.json() != stored.json():
            check_schema(schema, stored, table=read.table, unreadable=dict(resolved.unreadable))
        return MerkleReader(read, resolved, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from merkle.spark.writer import MerkleWriter

        return MerkleWriter.plan(self.options, schema, overwrite)


def _loads(text: str) -> dict[str, Any]:
    import json

    loaded = json.loads(text)
    assert isinstance(loaded, dict)
    return loaded


class MerkleReader(DataSourceReader):
    """Plans partitions (driver) and reads them (executors); see the module doc."""

    def __init__(self, read: ReadOptions, resolved: _Resolved, schema: StructType) -> None:
        self.lake: LakeRef = read.lake
        self.ttl = read.lease_ttl
        self.partition_bytes = read.partition_bytes
        self.min_partitions = read.min_partitions
        self.table_root = resolved.table_root
        self.key_fields = resolved.key_fields
        codec = key_codec(resolved.key_codec)
        self.codec_spec = codec.spec
        wanted = [f.name for f in schema if f.name not in resolved.key_fields]
        stored = [f.name for f in resolved.arrow if f.name not in resolved.key_fields]
        self.fields: tuple[str, ...] | None = None if set(stored) <= set(wanted) else tuple(wanted)
        self.convert = RowConverter.of(schema, resolved.arrow)
        stored_types = StructType.fromJson(_loads(resolved.schema_json))
        asked = schema.fieldNames()
        self.key_as_stored = all(  # a schema may leave the key out (a projection)
            key in asked and schema[key].dataType == stored_types[key].dataType
            for key in resolved.key_fields
        )
        from_pk = None if read.from_pk is None else parse_key(codec, read.from_pk, "from_pk")
        to_pk = None if read.to_pk is None else parse_key(codec, read.to_pk, "to_pk")
        self.keys: KeyRanges = pk_bounds(codec, from_pk, to_pk)
        self.lease = _lease_version(read, resolved)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (pyspark name)
        if not (FILTERS_SCOPED_PER_SCAN and self.key_as_stored and len(self.key_fields) == 1):
            # Spark compares: a pyspark that would reuse this pruned reader for later
            # queries of the same DataFrame (FILTERS_SCOPED_PER_SCAN); a key read as
            # another type (Spark compares the cast values: a FLOAT 0.1 is no DOUBLE 0.1
            # key); a composite key.
            yield from filters
            return
        keys, rest = key_filters(filters, self.key_fields[0], key_codec(self.codec_spec))
        self.keys = self.keys.intersect(keys)
        yield from rest

    def _table(self) -> Table:
        return Table.load(open_lake(self.lake).tables, CID.parse(self.table_root))

    def partitions(self) -> list[InputPartition]:
        # As Spark sizes file splits: at most partition_bytes, but small enough that
        # min_partitions tasks share the table, and not below the cost of opening one.
        table = self._table()
        spread = (table.size or 0) // self.min_partitions
        target = min(self.partition_bytes, max(MIN_PARTITION_BYTES, spread))
        plan = plan_reads(table, target_bytes=target, keys=self.keys)
        return [MerklePartition(slices) for slices in plan]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MerklePartition):
            return  # no partitions were planned: Spark still runs one empty task
        with hold_lease(self.lake, self.lease, self.ttl):
            table = self._table()
            for rows in read_slices(table, partition.slices, fields=self.fields, keys=self.keys):
                if rows.num_rows:
                    yield from self.convert(rows)


def _lease_version(read: ReadOptions, resolved: _Resolved) -> Lease:
    """A reader lease on the resolved version, taken before the read is planned.

    Its holder is option ``lease_holder`` if given (see :mod:`merkle.spark.release`).
    As ``open_db(lease=True)`` does: lease first, then check that the version
    is still kept (in the journal, or by a tag once retention trimmed its
    slot), so a concurrent collection either sees the lease or has removed the
    version (and the read stops here with a clear error).
    """
    conn = open_lake(read.lake)
    leases = conn.leases
    if read.lease_holder is not None:  # named, for merkle.spark.release_reads
        leases = LeaseManager(conn.store, holder=read.lease_holder)
    lease = leases.acquire_reader(read.db, resolved.version, resolved.db_root, read.lease_ttl)
    try:
        kept = conn._still_kept(read.db, resolved.version, resolved.db_root)
    except NotFoundError:
        kept = False
    if not kept:
        leases.release(lease)
        raise UsageError(
            f"version {resolved.version} of database {read.db!r} was removed by garbage "
            "collection after the DataFrame was loaded: load it again"
        ) from None
    return lease
