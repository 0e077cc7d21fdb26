"""Conformance of the version journal on every backend (memory, file, S3 over HTTP)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from merkle.blocks.codec import encode_node
from merkle.errors import ConflictError, IntegrityError, NotFoundError, UsageError
from merkle.refs import JournalConflictError, JournalEntry, RefManager
from merkle.refs.entry import entry_key, head_key, trimmed_key
from merkle.storage import ObjectStore

from .helpers import T0, Now, root

US = timedelta(microseconds=1)


@pytest.fixture
def now() -> Now:
    return Now()


@pytest.fixture
def refs(store: ObjectStore, now: Now) -> RefManager:
    return RefManager(store, now=now)


def fresh(refs: RefManager) -> RefManager:
    """Another manager on the same store: no cached state, like another process."""
    return RefManager(refs.store, now=refs._now)


def build(refs: RefManager, db: str, count: int, now: Now | None = None) -> list[JournalEntry]:
    entries = [refs.commit(db, None, root((db, 0)))]
    for i in range(1, count):
        if now is not None:
            now.advance(1)
        entries.append(refs.commit(db, entries[-1].version, root((db, i))))
    return entries


# -- unknown databases -------------------------------------------------------------


def test_an_unknown_database_has_no_head_and_clear_errors(refs: RefManager) -> None:
    assert refs.head("nope") is None
    assert refs.oldest_version("nope") is None
    assert refs.list_dbs() == []
    for call in (
        lambda: refs.get("nope", 0),
        lambda: refs.history("nope"),
        lambda: refs.at("nope", T0),
        lambda: refs.drop("nope"),
        lambda: refs.trim("nope", 1),
        lambda: refs.clone("nope", "other"),
        lambda: refs.commit("nope", 0, root(1)),
    ):
        with pytest.raises(NotFoundError, match="'nope'"):
            call()
    assert refs.head("other") is None


# -- commits -------------------------------------------------------------------------


def test_create_then_commit_builds_a_chain(refs: RefManager, now: Now) -> None:
    first = refs.commit("shop", None, root(0), author="ann", message="init", meta={"k": [1, 2.5]})
    assert first == JournalEntry(
        db="shop",
        version=0,
        root=root(0),
        parent=None,
        time=T0,
        author="ann",
        message="init",
        meta={"k": [1, 2.5]},
        forked_from=None,
        created=0,
    )
    now.advance(1)
    second = refs.commit("shop", 0, root(1))
    assert (second.version, second.parent, second.root) == (1, 0, root(1))
    assert (second.prev, second.created) == (first.digest, 0), "chained to its parent's bytes"
    assert second.time == T0 + timedelta(seconds=1)
    assert second.time.tzinfo is not None
    other = fresh(refs)
    assert other.head("shop") == second
    assert other.get("shop", 0) == first
    assert other.get("shop", 1) == second
    assert refs.list_dbs() == ["shop"]


def test_creating_an_existing_database_conflicts(refs: RefManager) -> None:
    refs.commit("shop", None, root(0))
    with pytest.raises(JournalConflictError) as info:
        fresh(refs).commit("shop", None, root(1))
    assert (info.value.db, info.value.expected, info.value.found) == ("shop", None, 0)
    assert isinstance(info.value, ConflictError)
    assert "'shop'" in str(info.value)
    assert "version 0" in str(info.value)
    assert refs.history("shop") == [refs.get("shop", 0)]


def test_a_stale_writer_conflicts_naming_expected_and_found(refs: RefManager) -> None:
    build(refs, "shop", 2)
    late = fresh(refs)
    assert late.head("shop").version == 1  # type: ignore[union-attr]
    refs.commit("shop", 1, root("winner"))
    with pytest.raises(JournalConflictError) as info:
        late.commit("shop", 1, root("loser"))
    assert (info.value.expected, info.value.found) == (1, 2)
    message = str(info.value)
    assert "'shop'" in message
    assert "at version 1" in message
    assert "at version 2" in message
    assert refs.get("shop", 2).root == root("winner")
    assert refs.head("shop").version == 2  # type: ignore[union-attr]


def test_expecting_a_version_past_the_head_conflicts(refs: RefManager) -> None:
    build(refs, "shop", 2)
    with pytest.raises(JournalConflictError) as info:
        fresh(refs).commit("shop", 7, root("x"))
    assert (info.value.expected, info.value.found) == (7, 1)
    assert refs.head("shop").version == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"root": "not-a-cid"}, "not a valid CID"),
        ({"root": 42}, "CID string"),
        ({"expected_version": -1}, "non-negative"),
        ({"expected_version": True}, "non-negative"),
        ({"expected_version": "0"}, "non-negative"),
        ({"author": 3}, "author"),
        ({"message": b"x"}, "message"),
        ({"meta": [1]}, "meta must be a dict"),
        ({"meta": {"s": {1, 2}}}, "set"),
        ({"meta": {1: "x"}}, "string"),
        ({"forked_from": {"db": "a"}}, "forked_from"),
        ({"forked_from": {"db": "..", "version": 0}}, "invalid database name"),
    ],
)
def test_bad_commit_arguments_are_usage_errors_and_write_nothing(
    refs: RefManager, kwargs: dict[str, object], match: str
) -> None:
    build(refs, "shop", 1)
    args: dict[str, object] = {"db": "shop", "expected_version": 0, "root": root(1)}
    args.update(kwargs)
    with pytest.raises(UsageError, match=match):
        refs.commit(**args)  # type: ignore[arg-type]
    assert [e.version for e in fresh(refs).history("shop")] == [0]


def test_creating_without_a_root_is_a_usage_error(refs: RefManager) -> None:
    with pytest.raises(UsageError, match="without a root"):
        refs.commit("shop", None, None)
    assert refs.head("shop") is None


# -- the head ------------------------------------------------------------------------


def test_head_probes_past_a_stale_hint(refs: RefManager) -> None:
    entries = build(refs, "shop", 40)
    refs.store.put(head_key("shop"), refs.store.get(entry_key("shop", 3)))
    assert fresh(refs).head("shop") == entries[-1]


@pytest.mark.parametrize("hint", [None, b"garbage", b"\xa1atx"])
def test_head_survives_a_missing_or_damaged_hint(refs: RefManager, hint: bytes | None) -> None:
    entries = build(refs, "shop", 5)
    if hint is None:
        refs.store.delete(head_key("shop"))
    else:
        refs.store.put(head_key("shop"), hint)
    assert fresh(refs).head("shop") == entries[-1]
    fresh(refs).commit("shop", 4, root("next"))
    assert fresh(refs).head("shop").version == 5  # type: ignore[union-attr]


def test_head_of_another_managers_commits(refs: RefManager) -> None:
    build(refs, "shop", 3)
    other = fresh(refs)
    assert other.head("shop").version == 2  # type: ignore[union-attr]
    build_more = refs.commit("shop", 2, root("more"))
    assert other.head("shop") == build_more, "a cached head is only a starting point"


# -- history and time travel ---------------------------------------------------------


def test_history_is_newest_first_with_limit(refs: RefManager) -> None:
    entries = build(refs, "shop", 70)
    assert fresh(refs).history("shop") == entries[::-1]
    assert refs.history("shop", limit=3) == entries[:-4:-1]
    assert refs.history("shop", limit=0) == []
    with pytest.raises(UsageError, match="limit"):
        refs.history("shop", limit=-1)


def test_time_travel_at_exact_boundaries(refs: RefManager, now: Now) -> None:
    v0 = refs.commit("shop", None, root(0))  # T0
    now.advance(1)
    v1 = refs.commit("shop", 0, root(1))  # T0+1
    v2 = refs.commit("shop", 1, root(2))  # T0+1, the same instant
    now.advance(1)
    v3 = refs.commit("shop", 2, root(3))  # T0+2
    reader = fresh(refs)
    with pytest.raises(NotFoundError, match="no version at or before"):
        reader.at("shop", T0 - US)
    assert reader.at("shop", T0) == v0
    assert reader.at("shop", v1.time - US) == v0
    assert reader.at("shop", v1.time) == v2, "equal times: the newest of them"
    assert reader.at("shop", v3.time - US) == v2
    assert reader.at("shop", v3.time) == v3
    assert reader.at("shop", v3.time + timedelta(days=365)) == v3
    naive = (v1.time + timedelta(milliseconds=500)).replace(tzinfo=None)
    assert reader.at("shop", naive) == v2, "a naive datetime is UTC"
    plus_two = timezone(timedelta(hours=2))
    assert reader.at("shop", v3.time.astimezone(plus_two)) == v3
    with pytest.raises(UsageError, match="datetime"):
        reader.at("shop", "2024-05-01")  # type: ignore[arg-type]


def test_time_travel_over_a_long_history(refs: RefManager, now: Now) -> None:
    entries = build(refs, "shop", 100, now)
    reader = fresh(refs)
    for entry in entries[::7]:
        assert reader.at("shop", entry.time) == entry
        assert reader.at("shop", entry.time + timedelta(milliseconds=999)) == entry


def test_commit_times_never_run_backwards(refs: RefManager, now: Now) -> None:
    first = refs.commit("shop", None, root(0))
    now.value = T0 - timedelta(hours=1)  # this machine's clock is behind
    second = refs.commit("shop", 0, root(1))
    assert second.time == first.time
    now.value = T0 + timedelta(seconds=5)
    third = refs.commit("shop", 1, root(2))
    assert refs.at("shop", T0) == second
    assert refs.at("shop", third.time) == third


# -- drop, re-create, clone ----------------------------------------------------------


def test_drop_and_create_again(refs: RefManager) -> None:
    build(refs, "shop", 3)
    build(refs, "other", 1)
    dropped = refs.drop("shop", message="bye")
    assert (dropped.version, dropped.root, dropped.parent, dropped.dropped) == (3, None, 2, True)
    reader = fresh(refs)
    assert reader.head("shop") == dropped
    assert reader.list_dbs() == ["other"]
    assert reader.get("shop", 1).root == root(("shop", 1)), "history survives a drop"
    with pytest.raises(NotFoundError, match="already dropped"):
        reader.drop("shop")
    with pytest.raises(NotFoundError, match="dropped at version 3"):
        reader.commit("shop", 3, root("x"))
    again = reader.commit("shop", None, root("again"))
    assert (again.version, again.parent, again.root) == (4, 3, root("again"))
    with pytest.raises(JournalConflictError) as info:
        fresh(refs).commit("shop", 3, root("x"))  # an old drop is not the head: a conflict
    assert info.value.found == 4
    assert refs.list_dbs() == ["other", "shop"]
    assert [e.version for e in refs.history("shop")] == [4, 3, 2, 1, 0]


def test_drop_with_expected_version_is_a_compare_and_set(refs: RefManager) -> None:
    build(refs, "shop", 2)
    with pytest.raises(JournalConflictError):
        refs.drop("shop", expected_version=0)
    assert refs.drop("shop", expected_version=1).version == 2


def test_clone_points_at_the_source_root(refs: RefManager) -> None:
    source = build(refs, "shop", 3)
    clone = refs.clone("shop", "dev", author="bob")
    assert (clone.version, clone.parent, clone.root) == (0, None, source[-1].root)
    assert clone.forked_from == {"db": "shop", "version": 2}
    assert clone.author == "bob"
    old = refs.clone("shop", "old", version=1)
    assert (old.root, old.forked_from) == (source[1].root, {"db": "shop", "version": 1})
    assert refs.list_dbs() == ["dev", "old", "shop"]
    assert refs.head("shop") == source[-1], "the source is untouched"
    with pytest.raises(JournalConflictError, match="'dev'"):
        refs.clone("shop", "dev")
    refs.drop("shop")
    with pytest.raises(NotFoundError, match="is a drop"):
        refs.clone("shop", "x")
    refs.drop("dev")
    restored = refs.clone("shop", "dev", version=0)
    assert (restored.version, restored.root) == (2, source[0].root)


# -- trimming ------------------------------------------------------------------------


def test_trim_removes_old_entries_and_keeps_the_head(refs: RefManager, now: Now) -> None:
    entries = build(refs, "shop", 10, now)
    assert refs.trim("shop", 6) == 6
    reader = fresh(refs)
    assert reader.oldest_version("shop") == 6
    with pytest.raises(NotFoundError, match="removed by retention") as info:
        reader.get("shop", 3)
    assert "oldest version kept is 6" in str(info.value)
    assert reader.history("shop") == entries[:5:-1]
    assert reader.get("shop", 6) == entries[6]
    with pytest.raises(NotFoundError, match="removed by retention"):
        reader.at("shop", entries[2].time)
    assert reader.at("shop", entries[7].time) == entries[7]
    assert reader.trim("shop", 6) == 0, "trimming again is harmless"
    assert reader.trim("shop", 1000) == 3, "never the head"
    assert reader.head("shop") == entries[-1]
    assert reader.oldest_version("shop") == 9
    assert reader.history("shop") == [entries[-1]]
    assert reader.commit("shop", 9, root("after")).version == 10


def test_a_stalled_writer_cannot_refill_a_trimmed_slot(refs: RefManager) -> None:
    build(refs, "shop", 6)
    stalled = fresh(refs)
    stalled.get("shop", 2)  # it read version 2 long ago and means to commit on it
    refs.trim("shop", 5)
    for expected in (2, 3):
        with pytest.raises(JournalConflictError) as info:
            stalled.commit("shop", expected, root("fork"))
        assert info.value.found == 5
    assert [e.root for e in refs.history("shop")] == [root(("shop", 5))]


def test_trim_of_a_dropped_database_keeps_the_drop(refs: RefManager) -> None:
    build(refs, "shop", 4)
    dropped = refs.drop("shop")
    assert refs.trim("shop", 10) == 4
    assert refs.head("shop") == dropped
    assert refs.list_dbs() == []
    assert refs.commit("shop", None, root("new")).version == 5


# -- damaged journals ----------------------------------------------------------------


def _damage(kind: str) -> bytes:
    node: dict[str, object] = {
        "type": "merkle/journal-entry",
        "v": 1,
        "db": "shop",
        "version": 1,
        "root": None,
        "parent": 0,
        "time": 0,
        "author": None,
        "message": None,
        "meta": {},
        "forked_from": None,
    }
    if kind == "garbage":
        return b"\xff\x00 not cbor"
    if kind == "list":
        return encode_node([1, 2])
    if kind == "type":
        node["type"] = "merkle/table"
    elif kind == "format":
        node["v"] = 99
    elif kind == "version":
        node["version"] = 7
    elif kind == "db":
        node["db"] = "elsewhere"
    elif kind == "parent":
        node["parent"] = 5
    elif kind == "field":
        node["time"] = "yesterday"
    elif kind == "missing":
        del node["meta"]
    return encode_node(node)


DAMAGE = ["garbage", "list", "type", "format", "version", "db", "parent", "field", "missing"]


@pytest.fixture
def damaged(refs: RefManager, request: pytest.FixtureRequest) -> str:
    build(refs, "shop", 3)
    key = entry_key("shop", 1)
    refs.store.put(key, _damage(request.param))
    return key


@pytest.mark.parametrize("damaged", DAMAGE, indirect=True)
def test_a_damaged_entry_is_an_integrity_error_naming_it(refs: RefManager, damaged: str) -> None:
    reader = fresh(refs)
    for call in (
        lambda: reader.get("shop", 1),
        lambda: reader.history("shop"),
        lambda: reader.commit("shop", 1, root("x")),
    ):
        with pytest.raises(IntegrityError, match=re.escape(damaged)):
            call()
    assert reader.head("shop").version == 2  # type: ignore[union-attr]
    assert reader.get("shop", 2).root == root(("shop", 2))


def test_a_damaged_head_entry_is_an_integrity_error(refs: RefManager) -> None:
    build(refs, "shop", 2)
    refs.store.put(entry_key("shop", 1), b"\x00\x01")
    with pytest.raises(IntegrityError, match=r"refs/shop/0+1"):
        fresh(refs).get("shop", 1)
    refs.store.delete(head_key("shop"))  # no hint: the head is read from its slot
    with pytest.raises(IntegrityError, match=r"refs/shop/0+1"):
        fresh(refs).head("shop")


def test_an_entry_from_a_newer_format_asks_for_an_upgrade(refs: RefManager) -> None:
    build(refs, "shop", 3)
    refs.store.put(entry_key("shop", 1), _damage("format"))
    with pytest.raises(IntegrityError, match="upgrade merkle-db"):
        refs.get("shop", 1)


def test_an_entry_missing_below_the_head_is_an_integrity_error(refs: RefManager) -> None:
    build(RefManager(refs.store, hint_every=1), "shop", 3)  # HEAD names version 2
    refs.store.delete(entry_key("shop", 1))  # only outside damage deletes an entry
    with pytest.raises(IntegrityError, match="missing below the head"):
        fresh(refs).get("shop", 1)


def test_list_dbs_is_sorted_and_skips_dropped(refs: RefManager) -> None:
    for name in ("zeta", "alpha", "Mid", "données"):
        refs.commit(name, None, root(name))
    refs.drop("zeta")
    assert fresh(refs).list_dbs() == sorted(["alpha", "Mid", "données"])


def test_entry_times_are_utc_microseconds(refs: RefManager, now: Now) -> None:
    now.value = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=-5)))
    entry = refs.commit("shop", None, root(0))
    assert entry.time == now.value
    assert entry.time.utcoffset() == timedelta(0)
    assert fresh(refs).get("shop", 0).time == datetime(2030, 1, 2, 8, 4, 5, 678901, tzinfo=UTC)


@pytest.mark.parametrize("fanout", [2, 8])
def test_wide_probing_gives_the_same_answers(refs: RefManager, now: Now, fanout: int) -> None:
    entries = build(refs, "shop", 60, now)
    refs.trim("shop", 7)
    refs.store.put(head_key("shop"), refs.store.get(entry_key("shop", 9)))
    wide = RefManager(refs.store, probe_fanout=fanout)
    assert wide.head("shop") == entries[-1]
    assert wide.oldest_version("shop") == 7
    for entry in entries[7::5]:
        assert wide.at("shop", entry.time) == entry
    refs.store.delete(trimmed_key("shop"))  # the marker is a hint: search past it
    assert RefManager(refs.store, probe_fanout=fanout).oldest_version("shop") == 7


@pytest.mark.parametrize("fanout", [0, -1, 1.5, True])
def test_a_bad_probe_fanout_is_a_usage_error(store: ObjectStore, fanout: object) -> None:
    with pytest.raises(UsageError, match="probe_fanout"):
        RefManager(store, probe_fanout=fanout)  # type: ignore[arg-type]


def test_the_head_hint_is_rewritten_every_nth_commit_and_on_drops(store: ObjectStore) -> None:
    refs = RefManager(store, hint_every=4)

    def hinted() -> int:
        found = RefManager(store)._hint_version("shop")
        assert found is not None
        return found

    build(refs, "shop", 7)
    assert hinted() == 4
    assert refs.drop("shop").version == 7
    assert hinted() == 7, "a drop always rewrites the hint"
    assert RefManager(store).head("shop").version == 7  # type: ignore[union-attr]


@pytest.mark.parametrize("every", [0, -4, 2.0, None])
def test_a_bad_hint_every_is_a_usage_error(store: ObjectStore, every: object) -> None:
    with pytest.raises(UsageError, match="hint_every"):
        RefManager(store, hint_every=every)  # type: ignore[arg-type]


def test_listing_with_wide_probes_does_not_nest_pools(store: ObjectStore) -> None:
    writer = RefManager(store, hint_every=1)
    names = [f"db{i:02d}" for i in range(20)]  # more than any store's I/O pool
    for name in names:
        build(writer, name, 6)
        store.put(head_key(name), store.get(entry_key(name, 0)))  # stale: probing needed
    assert RefManager(store, probe_fanout=8).list_dbs() == names
