"""GC against clocks that disagree, durations out of range, and its own fence entries.

* A collector whose clock runs ahead of the storage's removed temporaries of
  writes in flight, and unreachable blocks younger than the grace period:
  their ages are now measured on the storage's clock.
* A writer lease or GC lock left by a process whose clock was a day ahead
  stopped sweeps (or commits) for a day: it is now ignored, with a note.
* ``keep_within="1000000d"`` was stored and then every collection raised
  ``OverflowError``: now refused when given, clamped when read.
* ``keep_versions`` counted GC's own fence entries: now only committed states.

Clocks are injected (lambdas around ``time.time``); nothing sleeps.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
from conftest import Lake
from gc_helpers import backdate, connect

import merkle
from merkle.blocks.codec import encode_node
from merkle.blocks.store import BLOCK_PREFIX
from merkle.errors import UsageError
from merkle.gc import load_policy, set_retention
from merkle.gc.policy import MAX_DURATION, POLICY_KEY, POLICY_TYPE
from merkle.refs import LeaseManager

DAY = 86_400.0


def ahead(conn: merkle.Connection, seconds: float) -> LeaseManager:
    """A lease manager on ``conn``'s store whose clock runs ``seconds`` ahead."""
    return LeaseManager(conn.store, clock=lambda: time.time() + seconds)


def history(conn: merkle.Connection, count: int) -> merkle.Database:
    db = conn.create_db("shop").create_table("t", key="id").commit()
    for i in range(count):
        db = db.write("t", [{"id": i, "v": i}]).commit()
    return db


# -- item 2: temporaries are aged on the storage's clock --------------------------------


def test_a_collector_clock_ahead_does_not_remove_fresh_temporaries(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    with merkle.connect(lake.as_uri()) as conn:
        history(conn, 1)
        blocks = lake / "blocks"
        in_flight, recent, old = (blocks / f".tmp-{c * 32}" for c in "abc")
        for path in (in_flight, recent, old):
            path.write_bytes(b"x" * 10)
        now = time.time()
        os.utime(recent, (now - 1800, now - 1800))  # younger than the grace by the storage
        os.utime(old, (now - 7200, now - 7200))
        conn.leases = ahead(conn, 7200)  # the collector's clock: 2 h ahead
        report = merkle.gc(conn, grace=timedelta(hours=1))
        assert in_flight.exists(), "a write in flight"
        assert recent.exists(), "younger than the grace period by the storage's clock"
        assert not old.exists()
        assert report.temporaries_removed == 1


def test_a_collector_clock_ahead_spares_blocks_younger_than_the_grace(lake: Lake) -> None:
    """Block ages count on the storage's clock too: a collector 2 h ahead freed fresh blocks."""
    with connect(lake) as conn:
        history(conn, 1)
        recent, old = conn.blocks.put(b"written 30 min ago"), conn.blocks.put(b"2 h ago")
        now = time.time()
        backdate(conn.store, [conn.blocks.key(recent)], now - 1800)
        backdate(conn.store, [conn.blocks.key(old)], now - 7200)
        conn.leases = ahead(conn, 7200)  # the collector's clock: 2 h ahead
        report = merkle.gc(conn, grace=timedelta(hours=1), writer_wait=3.0)
        assert conn.blocks.has(recent), "younger than the grace period by the storage's clock"
        assert not conn.blocks.has(old)
        assert report.blocks_freed == 1, report.freed


@pytest.mark.s3
def test_a_collector_clock_ahead_keeps_a_fresh_s3_probe_object(
    request: pytest.FixtureRequest,
) -> None:
    from conftest import make_lake

    lake = make_lake("s3", Path("unused"), request)
    with connect(lake) as conn:
        history(conn, 1)
        store = conn.store
        probe = store.prefix + ".merkle-probe-in-flight"  # type: ignore[attr-defined]
        store._client.put_object(Bucket=store.bucket, Key=probe, Body=b"p")  # type: ignore[attr-defined]
        conn.leases = ahead(conn, 7200)
        report = merkle.gc(conn, grace=timedelta(hours=1))
        assert report.temporaries_removed == 0
        listed = store._client.list_objects_v2(Bucket=store.bucket, Prefix=probe)  # type: ignore[attr-defined]
        assert listed.get("KeyCount") == 1


# -- item 3: leases and locks of a holder whose clock was a day ahead ---------------------


def test_a_writer_lease_from_a_day_ahead_does_not_stop_the_sweep(lake: Lake) -> None:
    with connect(lake) as conn:
        history(conn, 3)
        ahead(conn, DAY).acquire_writer(15.0)  # the writer is then killed
        # S3 keeps timestamps in whole seconds: a block written in the second the
        # collection reads the storage's clock counts as new, whatever the grace (1 run
        # in 4 freed nothing). Every block older than the grace: the test says so.
        blocks = [info.key for info in conn.store.list(BLOCK_PREFIX)]
        backdate(conn.store, blocks, time.time() - 7200)
    with connect(lake) as collector:
        report = merkle.gc(collector, keep_versions=1, grace=timedelta(0), writer_wait=3.0)
        assert report.sweep_skipped is None
        assert report.blocks_freed > 0
        assert report.fences == 1, "its writer is fenced off like a stalled one"
        assert any("in this machine's future" in note for note in report.notes), report.notes
        assert list(collector.store.list("leases/")) == [], "the lease was reaped"


def test_a_gc_lock_from_a_day_ahead_is_taken_over_by_the_next_collection(lake: Lake) -> None:
    with connect(lake) as conn:
        history(conn, 2)
        ahead(conn, DAY).acquire_gc_lock(30.0)  # the collector is then killed
    with connect(lake) as collector:
        report = merkle.gc(collector, keep_versions=1, grace=timedelta(0), writer_wait=3.0)
        assert any("took the GC lock over" in note for note in report.notes), report.notes
    with connect(lake) as conn:
        conn.open_db("shop").write("t", [{"id": 99, "v": 99}]).commit()  # no wait


# -- item 4: durations out of range ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        ({"keep_within": "1000000d"}, "keep_within"),
        ({"keep_within": timedelta(days=40_000)}, "keep_within"),
        ({"grace": "99999999999d"}, "grace"),
        ({"grace": "9" * 400 + "w"}, "grace"),
    ],
)
def test_durations_out_of_range_are_refused_naming_the_option(
    kwargs: dict[str, object], option: str
) -> None:
    with merkle.connect("memory://") as conn:
        history(conn, 1)
        for call in (set_retention, merkle.gc):
            with pytest.raises(UsageError, match=rf"{option} .*too long.*36500d") as caught:
                call(conn, **kwargs)  # type: ignore[operator]
            assert f"--{option.replace('_', '-')}" in str(caught.value)
        assert load_policy(conn.store).default.keeps_everything, "nothing was stored"


def test_the_longest_duration_is_accepted() -> None:
    with merkle.connect("memory://") as conn:
        history(conn, 1)
        set_retention(conn, keep_within="36500d", grace="36500d")
        assert merkle.gc(conn).blocks_freed == 0


def test_a_stored_duration_out_of_range_is_clamped_and_gc_runs() -> None:
    """A policy an older merkle-db stored (it accepted 1000000d) must not crash GC."""
    with merkle.connect("memory://") as conn:
        history(conn, 3)
        huge = {"keep_versions": None, "keep_within_seconds": 1_000_000 * DAY}
        conn.store.put(
            POLICY_KEY,
            encode_node(
                {
                    "type": POLICY_TYPE,
                    "v": 1,
                    "default": huge,
                    "databases": {"shop": huge},
                    "grace_seconds": 1e300,
                }
            ),
        )
        policy = load_policy(conn.store)
        assert policy.default.keep_within == MAX_DURATION
        assert policy.for_db("shop").keep_within == MAX_DURATION
        assert policy.grace == MAX_DURATION
        report = merkle.gc(conn)
        assert report.databases["shop"].versions_trimmed == 0
        assert report.blocks_freed == 0


# -- item 5: fences do not count toward keep_versions --------------------------------------


def test_keep_versions_counts_committed_states_not_fences(lake: Lake) -> None:
    with connect(lake) as conn:
        db = history(conn, 3)  # the head is version 4
        previous = db.version - 1
        LeaseManager(conn.store, clock=lambda: time.time() - 100).acquire_writer(15.0)  # killed
    for _ in range(2):
        with connect(lake) as collector:
            merkle.gc(collector, keep_versions=2, grace=timedelta(0))
    with connect(lake) as fresh:
        kept = [(e.version, e.message) for e in fresh.history("shop")]
        assert kept == [(5, "gc fence"), (4, None), (3, None)]
        assert fresh.open_db("shop", version=previous).to_arrow("t").num_rows == 2
        fresh.open_db("shop").write("t", [{"id": 9, "v": 9}]).commit()
        merkle.gc(fresh, keep_versions=2, grace=timedelta(0))
        assert [e.version for e in fresh.history("shop")] == [6, 5, 4], "the fence rides along"
