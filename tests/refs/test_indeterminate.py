"""Commits whose outcome the store cannot report, and the cost of finding the head.

A conditional put that times out may or may not have happened. The ref
manager reads the slot back: our bytes mean we won, other bytes mean we lost,
an empty slot (or a failed read) is a CommitIndeterminateError, and the
journal read afterwards tells the truth.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from merkle.errors import CommitIndeterminateError, ConflictError, NotFoundError, StorageError
from merkle.refs import JournalConflictError, JournalIndeterminateError, RefManager
from merkle.refs.entry import entry_key, head_key
from merkle.storage import open_store

from .helpers import FaultyStore, root


@pytest.fixture
def faulty() -> Iterator[FaultyStore]:
    with open_store("memory://") as inner:
        yield FaultyStore(inner)


def setup_db(store: FaultyStore) -> RefManager:
    refs = RefManager(store)
    refs.commit("shop", None, root(0))
    return refs


def test_an_unknown_outcome_that_did_not_happen(faulty: FaultyStore) -> None:
    refs = setup_db(faulty)
    faulty.fail("put_if_absent", applied=False)
    with pytest.raises(JournalIndeterminateError) as info:
        refs.commit("shop", 0, root(1))
    assert isinstance(info.value, CommitIndeterminateError)
    assert (info.value.db, info.value.version, info.value.root) == ("shop", 1, root(1))
    assert "read version 1 of 'shop'" in str(info.value)
    truth = RefManager(faulty.inner)
    with pytest.raises(NotFoundError):
        truth.get("shop", 1)
    assert truth.head("shop").version == 0  # type: ignore[union-attr]
    assert refs.commit("shop", 0, root(1)).version == 1, "a retry is safe"


def test_an_unknown_outcome_that_did_happen(faulty: FaultyStore) -> None:
    refs = setup_db(faulty)
    faulty.fail("put_if_absent", applied=True)
    faulty.fail("get", key=entry_key("shop", 1))  # the read-back fails too: nobody can tell
    with pytest.raises(JournalIndeterminateError):
        refs.commit("shop", 0, root(1), message="mine")
    truth = RefManager(faulty.inner)
    entry = truth.get("shop", 1)
    assert (entry.root, entry.message) == (root(1), "mine")
    assert truth.head("shop") == entry
    with pytest.raises(JournalConflictError):
        refs.commit("shop", 0, root(1))  # a blind retry now conflicts: it did happen


def test_an_unknown_outcome_resolved_by_reading_back(faulty: FaultyStore) -> None:
    refs = setup_db(faulty)
    faulty.fail("put_if_absent", applied=True)
    entry = refs.commit("shop", 0, root(1))
    assert entry.version == 1
    assert RefManager(faulty.inner).head("shop") == entry


def test_a_commit_seen_but_not_yet_durable_is_made_durable_or_indeterminate(
    faulty: FaultyStore,
) -> None:
    """A file store whose directory flush failed after the link: the entry is visible
    but may not survive a crash, so it is flushed again before the commit returns."""
    refs = setup_db(faulty)
    faulty.fail("put_if_absent", applied=True)
    assert refs.commit("shop", 0, root(1)).version == 1
    assert faulty.calls["make_durable"] == 1
    faulty.fail("put_if_absent", applied=True)
    faulty.fail("make_durable")
    with pytest.raises(JournalIndeterminateError):
        refs.commit("shop", 1, root(2))


def test_an_unknown_outcome_where_another_writer_won(faulty: FaultyStore) -> None:
    refs = setup_db(faulty)
    RefManager(faulty.inner).commit("shop", 0, root("other"))
    refs_stale = RefManager(faulty)
    refs_stale._known["shop"] = refs.get("shop", 0)  # it believes version 0 is the head
    faulty.fail("put_if_absent", applied=True)
    with pytest.raises(JournalConflictError) as info:
        refs_stale.commit("shop", 0, root("mine"))
    assert info.value.found == 1
    assert refs.get("shop", 1).root == root("other")


def test_a_definite_failure_is_a_storage_error(faulty: FaultyStore) -> None:
    refs = setup_db(faulty)
    faulty.fail("put_if_absent", definite=True)
    with pytest.raises(StorageError) as info:
        refs.commit("shop", 0, root(1))
    assert info.value.definite
    assert not isinstance(info.value, CommitIndeterminateError)
    assert RefManager(faulty.inner).head("shop").version == 0  # type: ignore[union-attr]


def test_a_failed_hint_write_does_not_fail_the_commit(faulty: FaultyStore) -> None:
    refs = setup_db(faulty)
    faulty.fail("put")  # the HEAD hint
    entry = refs.commit("shop", 0, root(1))
    assert RefManager(faulty).head("shop") == entry


# -- S3: real HTTP, injected timeouts -------------------------------------------------


@pytest.mark.s3
def test_s3_errors_without_sending_are_indeterminate_and_not_committed(
    moto_endpoint: str,
) -> None:
    from conftest import new_bucket
    from s3faults import inject_s3_faults

    from merkle.storage.s3 import S3Store

    with S3Store(
        new_bucket(moto_endpoint),
        "lake",
        endpoint_url=moto_endpoint,
        max_attempts=2,
        retry_base_delay=0,
    ) as store:
        refs = RefManager(store)
        refs.commit("shop", None, root(0))
        # A 500 may or may not have been applied; here it was not, and the slot stays empty.
        with (
            inject_s3_faults(store, "PutObject", kind="5xx", times=2, after_send=False),
            pytest.raises(CommitIndeterminateError),
        ):
            refs.commit("shop", 0, root(1))
        truth = RefManager(store)
        assert truth.head("shop").version == 0  # type: ignore[union-attr]
        assert not store.exists(entry_key("shop", 1))
        # A refused connection surely sent nothing: a plain, definite StorageError.
        with (
            inject_s3_faults(store, "PutObject", kind="connection", times=2, after_send=False),
            pytest.raises(StorageError) as info,
        ):
            refs.commit("shop", 0, root(1))
        assert info.value.definite
        assert not isinstance(info.value, CommitIndeterminateError)
        assert RefManager(store).commit("shop", 0, root(1)).version == 1


@pytest.mark.s3
def test_s3_timeouts_after_sending_are_settled_by_the_journal(moto_endpoint: str) -> None:
    from conftest import new_bucket
    from s3faults import inject_s3_faults

    from merkle.storage.s3 import S3Store

    with S3Store(
        new_bucket(moto_endpoint),
        "lake",
        endpoint_url=moto_endpoint,
        max_attempts=2,
        retry_base_delay=0,
    ) as store:
        refs = RefManager(store)
        refs.commit("shop", None, root(0))
        # Every attempt reaches the bucket, every answer is lost, and so is the read-back.
        with (
            inject_s3_faults(store, "PutObject", kind="timeout", times=2) as puts,
            inject_s3_faults(store, "GetObject", kind="timeout", times=2, key=entry_key("shop", 1)),
            pytest.raises(JournalIndeterminateError),
        ):
            refs.commit("shop", 0, root(1))
        assert puts.sent == 2
        assert RefManager(store).get("shop", 1).root == root(1), "it did happen"
        # With the read-back working, the same fault resolves to success.
        with inject_s3_faults(store, "PutObject", kind="5xx", times=2):
            entry = refs.commit("shop", 1, root(2))
        assert RefManager(store).head("shop") == entry


# -- the cost of finding the head -------------------------------------------------------


def reads(store: FaultyStore) -> int:
    return store.calls.get("get", 0) + store.calls.get("list", 0)


def cold_head_reads(faulty: FaultyStore, versions: int, hint_every: int) -> int:
    refs = RefManager(faulty.inner, hint_every=hint_every)
    entry = refs.commit("shop", None, root(0))
    for i in range(1, versions):
        entry = refs.commit("shop", entry.version, root(i))
    before = reads(faulty)
    assert RefManager(faulty).head("shop") == entry
    return reads(faulty) - before


@pytest.mark.parametrize(("hint_every", "most"), [(1, 4), (4, 6)])
def test_finding_the_head_costs_the_same_at_any_length(hint_every: int, most: int) -> None:
    costs = []
    for versions in (12, 1_004, 10_000):  # the head 3 past a multiple of 4 each time
        with open_store("memory://") as inner:
            costs.append(cold_head_reads(FaultyStore(inner), versions, hint_every))
    assert costs == [costs[0]] * 3
    # HEAD, then probes past it; when it is current the slot it names is read too
    # (the hint's copy of an entry is never trusted), and the slot past the empty
    # one (a gap check): 4 reads, and 6 when 3 behind.
    assert costs[0] <= most


@pytest.mark.parametrize("stale_by", [1, 9, 200, 999])
def test_a_stale_hint_costs_logarithmic_probes(faulty: FaultyStore, stale_by: int) -> None:
    refs = RefManager(faulty.inner, hint_every=1)
    entry = refs.commit("shop", None, root(0))
    for i in range(1, 1000):
        entry = refs.commit("shop", entry.version, root(i))
    faulty.inner.put(head_key("shop"), faulty.inner.get(entry_key("shop", 999 - stale_by)))
    before = reads(faulty)
    assert RefManager(faulty).head("shop") == entry
    assert reads(faulty) - before <= 2 * math.log2(stale_by) + 4  # + the gap check


@pytest.mark.parametrize("versions", [300, 10_000])
def test_a_missing_hint_costs_logarithmic_probes_from_slot_zero(versions: int) -> None:
    with open_store("memory://") as inner:
        faulty = FaultyStore(inner)
        refs = RefManager(inner)
        entry = refs.commit("shop", None, root(0))
        for i in range(1, versions):
            entry = refs.commit("shop", entry.version, root(i))
        inner.delete(head_key("shop"))
        assert RefManager(faulty).head("shop") == entry
        assert "list" not in faulty.calls, "no listing of the journal"
        assert faulty.calls["get"] <= 2 * math.log2(versions) + 6  # HEAD, floor, probes, gap


def test_without_slot_zero_one_listing_decides(faulty: FaultyStore) -> None:
    assert RefManager(faulty).head("shop") is None
    assert faulty.calls == {"get": 3, "list": 1}, "HEAD, the floor, slot 0, one listing"
    refs = RefManager(faulty.inner)
    entry = refs.commit("shop", None, root(0))
    for i in range(1, 10):
        entry = refs.commit("shop", entry.version, root(i))
    faulty.inner.delete(head_key("shop"))
    faulty.inner.delete(entry_key("shop", 0))  # outside damage
    assert RefManager(faulty).head("shop") == entry


def test_a_warm_manager_far_behind_jumps_to_the_hint(faulty: FaultyStore) -> None:
    warm = RefManager(faulty)
    writer = RefManager(faulty.inner, hint_every=1)
    entry = writer.commit("shop", None, root(0))
    assert warm.head("shop") == entry
    for i in range(1, 1000):
        entry = writer.commit("shop", entry.version, root(i))
    before = reads(faulty)
    assert warm.head("shop") == entry
    # The slot past its cache, HEAD, one probe past HEAD, the slot after that (the
    # gap check), and the slot HEAD names.
    assert reads(faulty) - before == 5
    before = reads(faulty)
    assert warm.head("shop") == entry
    # Now current: the slot past it, the one after (the gap check), then the floor
    # (proving it was not trimmed since).
    assert reads(faulty) - before == 3


class AlwaysBeaten(FaultyStore):
    """Every conditional put loses, as if another writer always committed first."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return False


def test_a_drop_that_always_loses_gives_up_clearly(faulty: FaultyStore) -> None:
    setup_db(faulty)
    with pytest.raises(ConflictError, match="could not drop database 'shop'"):
        RefManager(AlwaysBeaten(faulty.inner)).drop("shop")
    assert not RefManager(faulty.inner).head("shop").dropped  # type: ignore[union-attr]
