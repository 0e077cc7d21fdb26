"""``df.write.format("merkle")``: each Spark partition writes its rows' tablets, one commit.

A data source cannot choose how its input is partitioned, and its commit
cannot start a second Spark stage. So each task here sorts its rows by key
and rebuilds the tablets their keys fall in (in ``overwrite`` mode: writes
its rows as a sorted run of new tablets), and the commit splices what the
tasks wrote into the tree. That is correct whenever no two partitions hold
keys of one tablet's range (overwrite: whenever their key ranges do not
overlap), as after ``merkle.spark.write``'s routing, a ``repartitionByRange``
on the key (overwrite), or for a DataFrame of one partition; otherwise the
commit refuses with an error that says to use ``merkle.spark.write``, which
routes rows to tablets first. Nothing is committed then, and the blocks the
tasks wrote are left for garbage collection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import StructType

from merkle.db.bulk import committed_table
from merkle.errors import UsageError
from merkle.spark.jobs import (
    GroupResult,
    TableSettings,
    WriteJob,
    commit_job,
    has_table,
    plan_base,
    run_groups,
)
from merkle.spark.lake import open_lake
from merkle.spark.options import WriteOptions, write_options
from merkle.spark.types import cbor_fields_of
from merkle.tablets.bulk import WriteGroup, plan_groups
from merkle.tablets.keys import infer_key_codec_arrow, key_codec

__all__ = ["MerkleCommitMessage", "MerkleWriter", "table_settings"]


@dataclass
class MerkleCommitMessage(WriterCommitMessage):
    """What one task wrote: a result per write group (tablet CIDs, never rows)."""

    results: list[GroupResult]


def table_settings(
    opts: WriteOptions, schema: StructType, existing_key: str | None
) -> TableSettings | None:
    """The settings of a table the write creates (None: it exists), checked against ``schema``."""
    names = schema.fieldNames()
    if existing_key is not None:
        if opts.key is not None and opts.key != existing_key:
            raise UsageError(
                f"table {opts.table!r} is keyed by {existing_key!r}, not by {opts.key!r}: "
                "drop the key option or write to another table"
            )
        if existing_key not in names:
            raise UsageError(
                f"the DataFrame has no column {existing_key!r}, the key field of table "
                f"{opts.table!r} (its columns: {', '.join(names)})"
            )
        return None
    if not opts.key:
        raise UsageError(
            f"table {opts.table!r} does not exist in database {opts.db!r}: pass the option "
            '"key" (the key field) to create it'
        )
    if opts.key not in names:
        raise UsageError(
            f"the key field {opts.key!r} is not a column of the DataFrame (its columns: "
            f"{', '.join(names)})"
        )
    if opts.key_codec is not None:
        codec = key_codec(opts.key_codec)
    else:
        codec = infer_key_codec_arrow(to_arrow_type(schema[opts.key].dataType))
    return TableSettings(opts.key, codec.spec)


class MerkleWriter(DataSourceArrowWriter):
    """Plans on the driver, writes tablets in tasks, commits once (see the module doc)."""

    def __init__(self, job: WriteJob, message: str | None, author: str | None) -> None:
        self.job = job
        self.message = message
        self.author = author

    @classmethod
    def plan(cls, options: Mapping[str, str], schema: StructType, overwrite: bool) -> MerkleWriter:
        opts = write_options(options)
        conn = open_lake(opts.lake)
        db = conn.open_db(opts.db)
        existing = (
            committed_table(db, opts.table).root.key_field if has_table(db, opts.table) else None
        )
        create = table_settings(opts, schema, existing)
        key_field = create.key if create is not None else existing
        assert key_field is not None
        key_type = to_arrow_type(schema[key_field].dataType)
        lease = conn.leases.acquire_writer(opts.lease_ttl, db=opts.db)
        try:
            base = plan_base(conn, db, opts.table, lease, create, key_type)
            replace = overwrite or create is not None
            groups = (
                (WriteGroup(0, None, None, None),) if replace else tuple(plan_groups(base.table))
            )
            job = WriteJob(
                lake=opts.lake,
                lease=lease,
                lease_ttl=opts.lease_ttl,
                db=opts.db,
                table=opts.table,
                base_version=db.version,
                table_root=base.root,
                based_on=base.based_on,
                groups=groups,
                mode="replace" if replace else "upsert",
                create=create,
                cbor_fields=cbor_fields_of(schema),
            )
        except BaseException:
            conn.leases.release(lease)
            raise
        return cls(job, opts.message, opts.author)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MerkleCommitMessage:
        return MerkleCommitMessage(run_groups(self.job, iterator, routed=False))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        results = [
            result
            for message in messages
            if isinstance(message, MerkleCommitMessage)
            for result in message.results
        ]
        try:
            commit_job(self.job, results, message=self.message, author=self.author)
        finally:
            self._release()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._release()

    def _release(self) -> None:
        with contextlib.suppress(Exception):
            open_lake(self.job.lake).leases.release(self.job.lease)
