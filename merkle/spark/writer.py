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

**Names and case.** The writer is planned in a Python process Spark starts
for it, which sees neither the session nor its settings, so it cannot tell
whether ``spark.sql.caseSensitive`` is on. Spark hands the setting to every
task, though: the writer is planned for both settings (one plan when they
match the names alike, the common case), each task writes under the plan of
the setting it is handed, and says which in its commit message, so the
commit lands the plan the tasks used. A setting under which the names
cannot be written (two columns differing only in case, with the setting off)
is the task's error, raised before it writes anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from merkle.errors import UsageError
from merkle.spark.casing import CASE_CONF, case_sensitive
from merkle.spark.jobs import GroupResult, WriteJob, commit_job, run_groups
from merkle.spark.lake import open_lake
from merkle.spark.options import write_options
from merkle.spark.planning import start_jobs

__all__ = ["MerkleCommitMessage", "MerkleWriter"]


@dataclass
class MerkleCommitMessage(WriterCommitMessage):
    """What one task wrote: a result per write group (tablet CIDs, never rows), and the
    ``spark.sql.caseSensitive`` setting it wrote under."""

    results: list[GroupResult]
    case_sensitive: bool = False


class MerkleWriter(DataSourceArrowWriter):
    """Plans on the driver, writes tablets in tasks, commits once (see the module doc)."""

    def __init__(
        self,
        plans: tuple[WriteJob | UsageError, WriteJob | UsageError],
        message: str | None,
        author: str | None,
    ) -> None:
        self.plans = plans  # by spark.sql.caseSensitive: off, on
        self.message = message
        self.author = author

    @classmethod
    def plan(cls, options: Mapping[str, str], schema: StructType, overwrite: bool) -> MerkleWriter:
        opts = write_options(options)
        mode = "replace" if overwrite else "upsert"
        off, on = (
            planned if isinstance(planned, UsageError) else planned[0]
            for planned in start_jobs(opts, schema, mode, sensitivity=(False, True))
        )
        return cls((off, on), opts.message, opts.author)

    def job(self, sensitive: bool) -> WriteJob:
        """The plan for the setting ``sensitive`` (its UsageError: names it cannot write)."""
        planned = self.plans[sensitive]
        if isinstance(planned, UsageError):
            raise planned
        return planned

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MerkleCommitMessage:
        sensitive = case_sensitive(None)  # as Spark hands the setting to this task
        results = run_groups(self.job(sensitive), iterator, routed=False)
        return MerkleCommitMessage(results, sensitive)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        told = [message for message in messages if isinstance(message, MerkleCommitMessage)]
        try:
            settings = {message.case_sensitive for message in told}
            if len(settings) > 1:
                raise UsageError(
                    f"the tasks of one write saw {CASE_CONF} both on and off (it changed while "
                    "the write ran); nothing was committed: write again"
                )
            job = self.job(settings.pop() if settings else False)
            results = [result for message in told for result in message.results]
            commit_job(job, results, message=self.message, author=self.author)
        finally:
            self._release()

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._release()

    def _release(self) -> None:
        for planned in {p.lease.id: p for p in self.plans if isinstance(p, WriteJob)}.values():
            with contextlib.suppress(Exception):
                open_lake(planned.lake).leases.release(planned.lease)
