"""The fault-injecting wrapper does what it says, so the sweep's verdicts mean something."""

from __future__ import annotations

import threading

import pytest

from merkle.errors import NotFoundError, StorageError
from merkle.storage import open_store

from .faults import Fault, FaultyStore, InjectedFaultError


@pytest.fixture
def store() -> FaultyStore:
    return FaultyStore(open_store("memory://"))


def test_without_faults_it_forwards_and_counts(store: FaultyStore) -> None:
    store.put("a/1", b"one")
    assert store.put_if_absent("a/2", b"two")
    assert not store.put_if_absent("a/2", b"other")
    store.put_many([("b/1", b"x"), ("b/2", b"y")])
    assert [info.key for info in store.list("a/")] == ["a/1", "a/2"]
    assert store.get_many(["b/1", "b/2"]) == {"b/1": b"x", "b/2": b"y"}
    store.delete_many(["b/1"])
    assert not store.exists("b/1")
    with pytest.raises(NotFoundError):
        store.get("missing")
    assert [op for op, _ in store.log] == [
        "put",
        "put_if_absent",
        "put_if_absent",
        "put_many",
        "list",
        "get_many",
        "delete_many",
        "exists",
        "get",
    ]
    assert store.fired == []


def test_refused_does_nothing_and_is_definite(store: FaultyStore) -> None:
    store.inject(Fault("refused", at=1, op="put"))
    with pytest.raises(InjectedFaultError) as caught:
        store.put("k", b"v")
    assert caught.value.definite is True
    assert isinstance(caught.value, StorageError)
    assert not store.exists("k")
    store.put("k", b"v")  # a fault fires once
    assert store.get("k") == b"v"


def test_timeout_does_nothing_and_is_indefinite_after_the_delay() -> None:
    slept: list[float] = []
    store = FaultyStore(
        open_store("memory://"), [Fault("timeout", 1, delay=7.0)], sleep=slept.append
    )
    with pytest.raises(InjectedFaultError) as caught:
        store.put_if_absent("k", b"v")
    assert caught.value.definite is False
    assert slept == [7.0]
    assert not store.exists("k")


def test_applied_happens_and_is_indefinite(store: FaultyStore) -> None:
    store.inject(Fault("applied", at=2))
    store.put("first", b"1")
    with pytest.raises(InjectedFaultError) as caught:
        store.delete("first")
    assert caught.value.definite is False
    assert not store.exists("first")
    assert store.fired[0].call == 2
    assert store.fired[0].op == "delete"


def test_partial_applies_the_first_half_of_a_bulk_write(store: FaultyStore) -> None:
    store.inject(Fault("partial", at=1, op="put_many"))
    with pytest.raises(InjectedFaultError):
        store.put_many([(f"k/{i}", b"v") for i in range(4)])
    assert [info.key for info in store.list("k/")] == ["k/0", "k/1"]


def test_a_failed_read_is_always_definite(store: FaultyStore) -> None:
    store.put("k", b"v")
    for kind in ("timeout", "applied", "partial"):
        store.inject(Fault(kind, at=store.calls + 1))  # type: ignore[arg-type]
        with pytest.raises(InjectedFaultError) as caught:
            store.get("k")
        assert caught.value.definite is True


def test_delay_succeeds_late() -> None:
    slept: list[float] = []
    store = FaultyStore(open_store("memory://"), [Fault("delay", 1, delay=3.0)], sleep=slept.append)
    store.put("k", b"v")
    assert slept == [3.0]
    assert store.get("k") == b"v"


def test_positions_count_one_operation_when_told(store: FaultyStore) -> None:
    store.inject(Fault("refused", at=2, op="get"))
    store.put("k", b"v")
    store.get("k")
    store.stat("k")
    with pytest.raises(InjectedFaultError):
        store.get("k")
    assert store.fired[0].call == 4


def test_calls_from_other_threads_are_neither_counted_nor_faulted() -> None:
    store = FaultyStore(open_store("memory://"), [Fault("refused", 1)], threads={0})
    worker = threading.Thread(target=store.put, args=("k", b"v"))
    worker.start()
    worker.join()
    assert store.get("k") == b"v"
    assert store.calls == 0
    assert store.fired == []


def test_bad_faults_are_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        Fault("explode", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="from 1"):
        Fault("refused", 0)
    with pytest.raises(ValueError, match="operation"):
        Fault("refused", 1, op="frobnicate")
