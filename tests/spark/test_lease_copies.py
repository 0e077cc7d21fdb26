"""A task's copy of the job's lease is older than the lake's: the lake's object decides.

The driver takes one lease per query and pickles it into the plan; every
task renews it while it runs. Before: a task checked and renewed the copy
it was given, whose expiry is the one of planning time, so a task starting
after that (a big table on a small cluster, a slow upstream stage) failed
with "lost its reader lease before this task ran ... use a larger
lease_ttl" although the lake showed the lease renewed and live; the commit
of ``df.write.format("merkle")`` did the same with the writer lease (found
with lease_ttl=60 and tasks of 20 s, the third wave failing). Now the lake's
lease object, the one garbage collection respects, is read first. Also the
``key`` option, which meant one thing when a write made the table and
another when it existed.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

import merkle
from merkle.errors import UsageError
from merkle.refs import LeaseExpiredError
from merkle.spark.lake import hold_lease, open_lake
from merkle.spark.options import LakeRef


@pytest.fixture
def lake(tmp_path: Path) -> LakeRef:
    uri = (tmp_path / "lake").as_uri()
    with merkle.connect(uri) as conn:
        conn.create_db("d").create_table("t", key="k").write("t", [{"k": 1}]).commit()
    return LakeRef(uri)


def test_a_task_given_a_stale_copy_of_a_live_lease_runs(lake: LakeRef) -> None:
    leases = open_lake(lake).leases
    head = open_lake(lake).open_db("d")
    planned = leases.acquire_reader("d", head.version, head.root, 60.0)
    stale = dataclasses.replace(planned, expires=time.time() - 30)  # as planned long ago
    assert not leases.is_valid(stale)
    with hold_lease(lake, stale, 60.0):  # the lake's object is live: the task runs
        pass
    assert leases.current(stale).expires > time.time() + 50  # and the task renewed it
    leases.release(planned)


def test_a_released_lease_still_stops_the_task(lake: LakeRef) -> None:
    leases = open_lake(lake).leases
    head = open_lake(lake).open_db("d")
    planned = leases.acquire_reader("d", head.version, head.root, 60.0)
    leases.release(planned)
    with pytest.raises(LeaseExpiredError, match="released or removed"):
        leases.current(planned)
    with pytest.raises(UsageError, match="lost its reader lease"), hold_lease(lake, planned, 60.0):
        pass


def test_a_lapsed_lease_is_not_revived(lake: LakeRef) -> None:
    """The lake's object lapsed too (nobody renewed it): still an error, never a renewal."""
    leases = open_lake(lake).leases
    head = open_lake(lake).open_db("d")
    planned = leases.acquire_reader("d", head.version, head.root, 60.0)
    lapsed = dataclasses.replace(planned, expires=time.time() - 30)
    leases.store.put(lapsed.key, _encoded(lapsed))
    with pytest.raises(UsageError, match="lost its reader lease"), hold_lease(lake, planned, 60.0):
        pass


def _encoded(lease: object) -> bytes:
    from merkle.refs.leases import _encode

    return _encode(lease)  # type: ignore[arg-type]


def test_the_key_option_means_the_same_when_the_table_exists(lake: LakeRef) -> None:
    """Before: key="u, s" made a table keyed by ['u', 's'], and the same option on the next
    write was refused: "keyed by ['u', 's'], not by 'u, s'" (a pipeline's re-run failed)."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from merkle.spark.jobs import table_settings
    from merkle.spark.options import WriteOptions

    schema = StructType([StructField("u", LongType()), StructField("s", StringType())])
    opts = WriteOptions(lake, "d", "t2", "u, s", None, None, None, 60.0)
    made = table_settings(opts, schema, None)
    assert made is not None
    assert made.key == ("u", "s")
    assert table_settings(opts, schema, made.key) is None
    other = WriteOptions(lake, "d", "t2", "s,u", None, None, None, 60.0)
    with pytest.raises(UsageError, match="keyed by"):
        table_settings(other, schema, made.key)
