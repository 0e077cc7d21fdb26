"""Giving up the reader leases of Spark reads once the reading is done.

A read's reader lease keeps every block of its version from garbage
collection while the read's queries run, and for ``lease_ttl`` (900 s) past
the last task that renewed it. A Python data source is not told when a query
ends (pyspark's ``DataSourceReader`` has no hook for it, and a DataFrame may
be queried again at any time), so the lease cannot be given up then. Reads given the option
``lease_holder`` take their leases under that name instead of the planning
process's ``host:pid``, and :func:`release_reads` gives up every reader lease
of that name: the explicit "I am done reading" that lets a collection right
after free the versions those reads held (doc/spark.md, "Reading").
"""

from __future__ import annotations

from typing import Any

from merkle.errors import UsageError
from merkle.spark.lake import open_lake
from merkle.spark.options import lake_ref

__all__ = ["release_reads"]


def release_reads(lake: str, holder: str, **options: Any) -> int:
    """Give up the reader leases that reads with ``option("lease_holder", holder)`` took.

    Returns how many were released. Call it once the queries of those
    DataFrames have finished: a task of one still running then fails saying
    its lease was lost (it never reads a block a collection freed). pyspark
    keeps a DataFrame's planned read, lease included, for its later queries,
    so those DataFrames cannot be queried again (their tasks say the lease
    was lost): load them again. ``options`` are store options (``endpoint_url=...``), as for
    :func:`merkle.spark.gc`. Leases of other holders are never touched.
    """
    if not isinstance(holder, str) or not holder.strip():
        raise UsageError(
            f"holder must be the non-empty 'lease_holder' option the reads were given, "
            f"got {holder!r}"
        )
    leases = open_lake(lake_ref(lake, options)).leases
    mine = [lease for lease in leases.lease_holders("reader") if lease.holder == holder.strip()]
    for lease in mine:
        leases.release(lease)
    return len(mine)
