"""Retention: versions outside it become unreadable, versions inside stay byte-identical.

Every test builds a history with one connection, closes it (so no writer
lease is live), collects with a second and reads back with a third, so no
cache can hide a deleted block. ``keep_within`` needs commits of different
ages: the writer's RefManager gets an injected clock (``now=``), so versions
are committed days apart without waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from conftest import Lake
from gc_helpers import block_keys, build_history, connect, dump, reachable, same_dump, settle

import merkle
from merkle.errors import NotFoundError
from merkle.gc import get_policy, set_retention
from merkle.refs import RefManager

#: Ages of the commits of the dated history (version n committed AGES[n] ago).
AGES = [
    timedelta(days=10),
    timedelta(days=8),
    timedelta(days=6),
    timedelta(days=4),
    timedelta(days=2),
    timedelta(hours=1),
]


def dated_history(lake: Lake, name: str = "shop") -> tuple[list[merkle.Database], datetime]:
    """Versions 0..5 of ``name`` committed AGES ago; (versions, the reference now)."""
    now = datetime.now(UTC)
    times = iter([now - age for age in AGES])
    with connect(lake) as conn:
        clock: Callable[[], datetime] = lambda: next(times)  # noqa: E731
        conn.refs = RefManager(conn.store, now=clock)
        versions = build_history(conn, name, commits=len(AGES) - 2)
    assert [v.version for v in versions] == list(range(len(AGES)))
    return versions, now


def check_retained(
    lake: Lake, versions: list[merkle.Database], kept: list[int], name: str = "shop"
) -> None:
    """Exactly ``kept`` versions read back (identical to before); the rest are gone by retention."""
    with connect(lake) as conn:
        for v in versions:
            if v.version in kept:
                assert same_dump(dump(conn.open_db(name, version=v.version)), dump(v)), v
            else:
                with pytest.raises(NotFoundError, match="removed by retention"):
                    conn.open_db(name, version=v.version)
        assert [e.version for e in conn.history(name)] == sorted(kept, reverse=True)
        assert merkle.verify(conn).ok


def test_keep_versions_frees_exactly_what_only_older_versions_reach(lake: Lake) -> None:
    with connect(lake) as conn:
        versions = build_history(conn, commits=5)
        dumps = {v.version: dump(v) for v in versions}
        settle(conn)  # every block older than the grace (S3: whole-second timestamps)
    with connect(lake) as conn:
        everything = block_keys(conn.store)
        needed = reachable(conn.store, [v.root for v in versions[-3:]])
        report = merkle.gc(conn, keep_versions=3, grace="0s")
        assert report.blocks_freed == len(everything - needed) > 0
        assert set(report.freed) == everything - needed
        assert block_keys(conn.store) == needed
        assert report.databases["shop"].versions_trimmed == len(versions) - 3
        assert report.databases["shop"].oldest_kept == versions[-3].version
    with connect(lake) as conn:
        for v in versions[:-3]:
            with pytest.raises(NotFoundError, match="removed by retention") as caught:
                conn.open_db("shop", version=v.version)
            assert f"oldest version kept is {versions[-3].version}" in str(caught.value)
        for v in versions[-3:]:
            assert same_dump(dump(conn.open_db("shop", version=v.version)), dumps[v.version])
        assert merkle.verify(conn).ok


def test_keep_versions_one_keeps_only_the_head(lake: Lake) -> None:
    with connect(lake) as conn:
        versions = build_history(conn, commits=3)
        settle(conn)  # every block older than the grace (S3: whole-second timestamps)
    with connect(lake) as conn:
        merkle.gc(conn, keep_versions=1, grace="0s")
        assert block_keys(conn.store) == reachable(conn.store, [versions[-1].root])
    check_retained(lake, versions, kept=[versions[-1].version])


def test_keep_within_keeps_what_time_travel_inside_the_window_needs(lake: Lake) -> None:
    versions, now = dated_history(lake)
    with connect(lake) as conn:
        merkle.gc(conn, keep_within="3d", grace="0s")
        # The state at the start of the window (version 3, committed 4 days ago) stays
        # readable: open_db(at=now - 3d) must keep working.
        assert conn.open_db("shop", at=now - timedelta(days=3)).version == 3
        with pytest.raises(NotFoundError, match="removed by retention"):
            conn.open_db("shop", at=now - timedelta(days=7))
    check_retained(lake, versions, kept=[3, 4, 5])


def test_keep_within_a_window_older_than_the_history_keeps_everything(lake: Lake) -> None:
    versions, _ = dated_history(lake)
    with connect(lake) as conn:
        report = merkle.gc(conn, keep_within="30d", grace="0s")
        assert report.blocks_freed == 0
    check_retained(lake, versions, kept=list(range(6)))


@pytest.mark.parametrize(
    ("keep_versions", "keep_within", "kept"),
    [
        (4, "3d", [2, 3, 4, 5]),  # the count reaches further back than the window
        (2, "7d", [1, 2, 3, 4, 5]),  # the window reaches further back than the count
        (1, "1d", [4, 5]),  # the window still needs the state at its start (version 4)
    ],
)
def test_keep_versions_and_keep_within_keep_the_union(
    lake: Lake, keep_versions: int, keep_within: str, kept: list[int]
) -> None:
    versions, _ = dated_history(lake)
    with connect(lake) as conn:
        merkle.gc(conn, keep_versions=keep_versions, keep_within=keep_within, grace="0s")
    check_retained(lake, versions, kept=kept)


def test_a_per_database_override_applies_on_top_of_any_default(lake: Lake) -> None:
    with connect(lake) as conn:
        a = build_history(conn, "a", commits=3)
        b = build_history(conn, "b", commits=3)
        c = build_history(conn, "c", commits=3)
        set_retention(conn, keep_versions=1, db="a")
        set_retention(conn, keep_versions=4, db="c")
        policy = get_policy(conn)
        assert policy.for_db("a").keep_versions == 1
        assert policy.for_db("b").keeps_everything
    with connect(lake) as conn:
        merkle.gc(conn, grace="0s")  # the stored default: keep every version
    check_retained(lake, a, [4], "a")
    check_retained(lake, b, [0, 1, 2, 3, 4], "b")
    check_retained(lake, c, [1, 2, 3, 4], "c")
    with connect(lake) as conn:
        # A run's own retention replaces the default, not the overrides.
        merkle.gc(conn, keep_versions=2, grace="0s")
    check_retained(lake, a, [4], "a")
    check_retained(lake, b, [3, 4], "b")
    check_retained(lake, c, [1, 2, 3, 4], "c")


def test_removing_an_override_and_a_stored_default(lake: Lake) -> None:
    with connect(lake) as conn:
        a = build_history(conn, "a", commits=3)
        set_retention(conn, keep_versions=1, db="a")
        set_retention(conn, db="a")  # neither limit: the override goes
        assert "a" not in get_policy(conn).databases
        set_retention(conn, keep_versions=3)  # the lake default
    with connect(lake) as conn:
        report = merkle.gc(conn, grace="0s")
        assert report.databases["a"].versions_kept == 3
    check_retained(lake, a, [2, 3, 4], "a")
