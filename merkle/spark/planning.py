"""Planning a distributed write on the driver: the writer lease, the table, the job.

:func:`start_job` plans one :class:`~merkle.spark.jobs.WriteJob` for
``merkle.spark.write`` and ``delete``, whose driver knows the session's
settings; :func:`start_jobs` plans one per setting of
``spark.sql.caseSensitive`` for ``df.write.format("merkle")``, whose writer
is planned where no session is seen (its tasks pick theirs, see
:mod:`merkle.spark.writer`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.types import StructType

from merkle.db.bulk import committed_table
from merkle.db.connection import Connection
from merkle.db.database import Database
from merkle.errors import UsageError
from merkle.refs import Lease
from merkle.spark.casing import match_case
from merkle.spark.jobs import (
    Base,
    TableSettings,
    WriteJob,
    has_table,
    plan_base,
    table_settings,
)
from merkle.spark.lake import hold_lease, open_lake
from merkle.spark.options import WriteOptions
from merkle.spark.types import cbor_fields_of
from merkle.tablets.bulk import WriteGroup, plan_groups

__all__ = ["start_job", "start_jobs"]


def start_job(
    opts: WriteOptions,
    schema: StructType,
    mode: str,
    *,
    case_sensitive: bool,
    time_zone: str | None = None,
    keep: contextlib.ExitStack | None = None,
) -> tuple[WriteJob, Base]:
    """Plan a write of rows of ``schema`` on the head of ``opts.db``.

    Takes the job's writer lease before the first block is written: with
    ``keep``, this process renews it from then on and releases it when
    ``keep`` closes (the job's end); without, the caller releases it when the
    job ends. A table that does not exist is planned for creation, its rows
    replacing nothing (mode "replace").
    ``case_sensitive``: Spark's ``spark.sql.caseSensitive``; when off, the
    columns take the spelling of the fields they match (:mod:`merkle.spark.casing`),
    and :attr:`WriteJob.columns` holds the names the rows are written under.
    ``time_zone``: Spark's session time zone (None: tasks read it from their context).
    """
    (planned,) = start_jobs(
        opts, schema, mode, sensitivity=(case_sensitive,), time_zone=time_zone, keep=keep
    )
    assert not isinstance(planned, UsageError)  # start_jobs raises when every way fails
    return planned


def start_jobs(
    opts: WriteOptions,
    schema: StructType,
    mode: str,
    *,
    sensitivity: Sequence[bool],
    time_zone: str | None = None,
    keep: contextlib.ExitStack | None = None,
) -> list[tuple[WriteJob, Base] | UsageError]:
    """:func:`start_job` for each setting of ``spark.sql.caseSensitive`` in ``sensitivity``,
    under one writer lease, for a planner that cannot see the session's setting
    (``df.write.format("merkle")``: its tasks can, and pick their plan).

    Settings that match the names alike share one job (in the common case,
    no name differs from another only in case, there is one). A setting
    whose names cannot be written gives its UsageError in its place; if every
    setting fails with one message, that error is raised.
    """
    conn = open_lake(opts.lake)
    db = conn.open_db(opts.db)
    committed = committed_table(db, opts.table) if has_table(db, opts.table) else None
    fields = None
    if committed is not None:
        fields = committed.schema.names if committed.schema is not None else committed.key.fields
    existing = committed.key.fields if committed is not None else None
    drafts: list[_Draft | UsageError] = []
    for sensitive in sensitivity:
        try:
            matched, spelled = match_case(opts, schema, fields, sensitive=sensitive)
            create = table_settings(matched, spelled, existing)
            made = "replace" if create is not None else mode  # a new table: rows replace none
            drafts.append(_Draft(matched, spelled, create, made))
        except UsageError as exc:
            drafts.append(exc)
    errors = [draft for draft in drafts if isinstance(draft, UsageError)]
    if len(errors) == len(drafts):
        if len({str(error) for error in errors}) == 1:
            raise errors[0]
        return list(errors)  # each setting fails its own way: a task raises the one it has
    lease = conn.leases.acquire_writer(opts.lease_ttl, db=opts.db)
    if keep is not None:  # renewed here from now on, released when the job ends
        keep.callback(conn.leases.release, lease)
        keep.enter_context(hold_lease(opts.lake, lease, opts.lease_ttl))
    planned: dict[tuple[object, ...], tuple[WriteJob, Base]] = {}
    result: list[tuple[WriteJob, Base] | UsageError] = []
    try:
        for draft in drafts:
            if isinstance(draft, UsageError):
                result.append(draft)
                continue
            same = draft.same()
            if same not in planned:
                planned[same] = _job(conn, db, draft, lease, time_zone)
            result.append(planned[same])
    except BaseException:
        conn.leases.release(lease)
        raise
    return result


@dataclass(frozen=True)
class _Draft:
    """One way of matching a write's names to the table: what :func:`_job` plans from."""

    opts: WriteOptions
    schema: StructType
    create: TableSettings | None
    mode: str

    def same(self) -> tuple[object, ...]:
        return (self.opts, self.schema.json(), self.create, self.mode)


def _job(
    conn: Connection, db: Database, draft: _Draft, lease: Lease, time_zone: str | None
) -> tuple[WriteJob, Base]:
    opts, schema, mode = draft.opts, draft.schema, draft.mode
    base = plan_base(conn, db, opts.table, lease, draft.create, schema)
    whole = (WriteGroup(0, None, None, None),)
    job = WriteJob(
        lake=opts.lake,
        lease=lease,
        lease_ttl=opts.lease_ttl,
        db=opts.db,
        table=opts.table,
        base_version=db.version,
        table_root=base.root,
        based_on=base.based_on,
        groups=whole if mode == "replace" else tuple(plan_groups(base.table)),
        mode=mode,
        create=draft.create,
        cbor_fields=cbor_fields_of(schema),
        columns=tuple(schema.fieldNames()),
        time_zone=time_zone,
    )
    return job, base
