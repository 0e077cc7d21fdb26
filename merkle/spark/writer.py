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
from pyspark.sql.types import StructType

from merkle.spark.casing import case_sensitive
from merkle.spark.jobs import GroupResult, WriteJob, commit_job, run_groups, start_job
from merkle.spark.lake import open_lake
from merkle.spark.options import write_options

__all__ = ["MerkleCommitMessage", "MerkleWriter"]


@dataclass
class MerkleCommitMessage(WriterCommitMessage):
    """What one task wrote: a result per write group (tablet CIDs, never rows)."""

    results: list[GroupResult]


class MerkleWriter(DataSourceArrowWriter):
    """Plans on the driver, writes tablets in tasks, commits once (see the module doc)."""

    def __init__(self, job: WriteJob, message: str | None, author: str | None) -> None:
        self.job = job
        self.message = message
        self.author = author

    @classmethod
    def plan(cls, options: Mapping[str, str], schema: StructType, overwrite: bool) -> MerkleWriter:
        opts = write_options(options)
        mode = "replace" if overwrite else "upsert"
        job, _ = start_job(opts, schema, mode, case_sensitive=case_sensitive(None))
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
