"""A journal entry deleted from outside (a gap below newer entries) is refused, never served.

Before, a head search that met the empty slot stopped there and served the
entry below it as the head (a shorter history), and a commit on that head
wrote the version into the gap, where readers who find the real head never
look. Now the search reads one slot past the empty one, and a commit checks
the slot after its own, so both raise :class:`JournalGapError`. Writers
racing for the slot after the head are not mistaken for a gap.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from merkle.errors import IntegrityError, NotFoundError
from merkle.refs import JournalConflictError, JournalEntry, JournalGapError, RefManager
from merkle.refs.entry import entry_key, head_key
from merkle.storage import ObjectStore, open_store

from .helpers import FaultyStore, root


def build(refs: RefManager, db: str, count: int) -> list[JournalEntry]:
    entries = [refs.commit(db, None, root((db, 0)))]
    for i in range(1, count):
        entries.append(refs.commit(db, entries[-1].version, root((db, i))))
    return entries


def test_a_cold_reader_refuses_the_head_below_a_gap(store: ObjectStore) -> None:
    build(RefManager(store), "shop", 8)  # versions 0-7, HEAD names version 4
    store.delete(entry_key("shop", 5))  # outside damage
    with pytest.raises(JournalGapError, match=r"'shop'.*version 5.*merkle verify") as caught:
        RefManager(store).head("shop")
    assert isinstance(caught.value, IntegrityError)
    assert (caught.value.db, caught.value.missing) == ("shop", 5)
    assert "doc/operations.md" in str(caught.value)


def test_a_warm_reader_refuses_the_head_below_a_gap(store: ObjectStore) -> None:
    writer = RefManager(store)
    entries = build(writer, "shop", 5)
    warm = RefManager(store)
    assert warm.head("shop") == entries[-1]  # it caches version 4
    for i in range(5, 8):
        entries.append(writer.commit("shop", entries[-1].version, root(i)))
    store.delete(entry_key("shop", 5))
    with pytest.raises(JournalGapError, match="version 5"):
        warm.head("shop")


def test_a_commit_never_fills_a_gap(store: ObjectStore) -> None:
    stale = RefManager(store)
    entries = build(stale, "shop", 5)  # the stale writer last saw version 4
    other = RefManager(store)
    for i in range(5, 8):
        entries.append(other.commit("shop", entries[-1].version, root(i)))
    store.delete(entry_key("shop", 5))
    with pytest.raises(JournalGapError, match="version 5"):
        stale.commit("shop", 4, root("lost"))
    assert not store.exists(entry_key("shop", 5)), "nothing was written into the gap"


def test_the_gap_in_the_adversarial_report_is_refused_end_to_end(store: ObjectStore) -> None:
    """gap_commit.py: open the head (refused), and a commit on version 4 (refused)."""
    build(RefManager(store, hint_every=4), "shop", 8)
    store.delete(entry_key("shop", 5))
    refs = RefManager(store)
    with pytest.raises(JournalGapError):
        refs.head("shop")
    with pytest.raises(JournalGapError):
        refs.commit("shop", 4, root("new"))
    with pytest.raises(IntegrityError):
        refs.history("shop")


def test_a_writer_that_lost_the_race_gets_a_conflict_not_a_gap(store: ObjectStore) -> None:
    first, second = RefManager(store), RefManager(store)
    base = build(first, "shop", 3)[-1]
    assert second.head("shop") == base
    won = first.commit("shop", base.version, root("first"))
    first.commit("shop", won.version, root("first again"))
    with pytest.raises(JournalConflictError) as caught:
        second.commit("shop", base.version, root("second"))
    assert caught.value.found == won.version + 1
    assert second.commit("shop", won.version + 1, root("second")).version == won.version + 2


class Racing(FaultyStore):
    """Runs ``hook`` once, right after the first read of ``key`` found it empty."""

    def __init__(self, inner: ObjectStore, key: str, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self.key, self.hook, self.fired = key, hook, False

    def get(self, key: str) -> bytes:
        try:
            return super().get(key)
        except NotFoundError:
            if key == self.key and not self.fired:
                self.fired = True
                self.hook()
            raise


@pytest.mark.parametrize("warm", [False, True])
def test_writers_racing_past_the_head_are_not_a_gap(warm: bool) -> None:
    with open_store("memory://") as inner:
        writer = RefManager(inner, hint_every=1)
        entries = build(writer, "shop", 4)  # head 3

        def two_commits() -> None:  # land after the reader saw slot 4 empty
            entries.append(writer.commit("shop", entries[-1].version, root(4)))
            entries.append(writer.commit("shop", entries[-1].version, root(5)))

        racing = Racing(inner, entry_key("shop", 4), two_commits)
        reader = RefManager(racing)
        if warm:
            reader._remember(entries[-1])
        assert reader.head("shop") == entries[-1]
        assert racing.fired
        assert entries[-1].version == 5


def test_trimming_below_the_gap_is_a_way_out(store: ObjectStore) -> None:
    refs = RefManager(store)
    entries = build(refs, "shop", 8)
    store.delete(entry_key("shop", 5))
    assert RefManager(store).list_dbs() == ["shop"], "a damaged journal is still listed"
    assert refs.trim("shop", 6) == 6
    fresh = RefManager(store)
    assert fresh.head("shop") == entries[-1]
    assert [e.version for e in fresh.history("shop")] == [7, 6]
    assert fresh.commit("shop", 7, root("after")).version == 8


def test_an_empty_slot_below_the_floor_is_not_a_gap(store: ObjectStore) -> None:
    """A trim raised the floor to 6 and stopped after deleting slot 5 (a crash mid-trim)."""
    refs = RefManager(store, hint_every=4)
    entries = build(refs, "shop", 8)  # HEAD names version 4
    store.put("refs/shop/TRIMMED", b"6")
    store.delete(entry_key("shop", 5))
    assert store.exists(entry_key("shop", 4))
    assert store.exists(head_key("shop"))
    assert RefManager(store).head("shop") == entries[-1]
    warm = RefManager(store)
    warm._remember(entries[3])  # a cached head that retention trimmed since
    assert warm.head("shop") == entries[-1]


def test_the_gap_checks_cost_one_read_each() -> None:
    """A warm commit reads the floor and the slot after its own; a warm head, the two
    slots past it and the floor; a cold one HEAD, two empty slots and the head's slot."""
    with open_store("memory://") as inner:
        counted = FaultyStore(inner)
        writer = RefManager(counted)
        entry = build(writer, "shop", 8)[-1]  # HEAD names version 4, the head is 7
        counted.calls.clear()
        entry = writer.commit("shop", entry.version, root("next"))  # version 8: HEAD too
        assert counted.calls == {"get": 2, "put_if_absent": 1, "put": 1}
        counted.calls.clear()
        assert writer.head("shop") == entry
        assert counted.calls == {"get": 3}
        counted.calls.clear()
        assert RefManager(counted).head("shop") == entry
        assert counted.calls == {"get": 4}
