"""The ObjectStore contract, run once on every backend (memory, file, S3 over HTTP to moto).

Every test takes the ``store`` fixture, which is parametrised over the
backends, so a new backend passes this file or is not done.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import pytest

from merkle.errors import NotFoundError, UsageError
from merkle.storage import ObjectStore
from merkle.storage.file import FileStore
from merkle.storage.s3 import S3Store

MIB = 1 << 20

# Keys no backend may accept: empty, absolute, empty segments, dot segments
# (backends keep temporaries there), control characters, backslashes, non-strings.
INVALID_KEYS: list[Any] = [
    "",
    "/a",
    "a/",
    "a//b",
    "..",
    "a/../b",
    ".hidden",
    "a/.tmp-1",
    "a\x00b",
    "a\nb",
    "a\x7fb",
    "a\\b",
    5,
    None,
    b"a",
]


def set_mtime(store: ObjectStore, key: str, mtime: float) -> None:
    """Backdate an object on any backend (moto's bucket state is in this process)."""
    if isinstance(store, S3Store):
        from s3faults import set_moto_mtime

        set_moto_mtime(store, key, mtime)
    else:
        store.set_mtime(key, mtime)  # type: ignore[attr-defined]


def atomic_conditional_puts(store: ObjectStore) -> Any:
    """moto checks If-None-Match and writes in two steps; real S3 decides atomically."""
    if isinstance(store, S3Store):
        from s3faults import moto_atomic_conditional_puts

        return moto_atomic_conditional_puts()
    return nullcontext()


def keys_of(store: ObjectStore, prefix: str = "") -> list[str]:
    return [info.key for info in store.list(prefix)]


# -- reads and writes -----------------------------------------------------------


def test_put_then_get_returns_the_bytes(store: ObjectStore) -> None:
    store.put("blocks/abc", b"hello")
    assert store.get("blocks/abc") == b"hello"


def test_put_overwrites(store: ObjectStore) -> None:
    store.put("k", b"old")
    store.put("k", b"new, longer than before")
    assert store.get("k") == b"new, longer than before"
    store.put("k", b"s")
    assert store.get("k") == b"s"
    assert keys_of(store) == ["k"]


def test_bytearray_and_memoryview_are_stored_as_bytes(store: ObjectStore) -> None:
    store.put("a", bytearray(b"xy"))  # type: ignore[arg-type]
    store.put("b", memoryview(b"zw"))  # type: ignore[arg-type]
    assert store.get("a") == b"xy"
    assert store.get("b") == b"zw"


def test_empty_object(store: ObjectStore) -> None:
    store.put("empty", b"")
    assert store.get("empty") == b""
    assert store.stat("empty").size == 0
    assert store.exists("empty")
    assert store.get_range("empty", 0, 10) == b""


def test_five_mib_object(store: ObjectStore) -> None:
    data = bytes(range(256)) * (5 * MIB // 256) + b"tail"
    store.put("big", data)
    assert store.get("big") == data
    assert store.stat("big").size == len(data)
    assert store.get_range("big", 5 * MIB - 2, 10) == data[5 * MIB - 2 :]


def test_unicode_and_space_keys(store: ObjectStore) -> None:
    for key in ("é/ü", "a b/c d", "日本/語"):
        store.put(key, key.encode())
    for key in ("é/ü", "a b/c d", "日本/語"):
        assert store.get(key) == key.encode()


# -- ranged reads -----------------------------------------------------------------

RANGE_DATA = bytes(range(256)) * 4  # 1024 bytes


@pytest.mark.parametrize(
    ("start", "length", "expected"),
    [
        (0, 10, RANGE_DATA[:10]),
        (100, 50, RANGE_DATA[100:150]),
        (1000, 100, RANGE_DATA[1000:]),  # short at the end
        (1023, 1, RANGE_DATA[1023:]),  # the last byte
        (1024, 5, b""),  # exactly at the end
        (5000, 5, b""),  # past the end
        (5, 0, b""),  # zero length
        (0, 1024, RANGE_DATA),
        (0, 10**9, RANGE_DATA),
    ],
)
def test_get_range(store: ObjectStore, start: int, length: int, expected: bytes) -> None:
    store.put("r", RANGE_DATA)
    assert store.get_range("r", start, length) == expected


@pytest.mark.parametrize(("start", "length"), [(-1, 5), (0, -1), (1.5, 2), ("0", 2), (True, 1)])
def test_get_range_rejects_bad_bounds(store: ObjectStore, start: Any, length: Any) -> None:
    store.put("r", RANGE_DATA)
    with pytest.raises(UsageError, match="'r'"):
        store.get_range("r", start, length)


@pytest.mark.parametrize("length", [0, 10])
def test_get_range_of_a_missing_key_is_not_found(store: ObjectStore, length: int) -> None:
    with pytest.raises(NotFoundError, match="'nope'"):
        store.get_range("nope", 0, length)


# -- stat, exists, touch --------------------------------------------------------------


def test_stat_reports_size_and_mtime(store: ObjectStore) -> None:
    before = time.time()
    store.put("a/one", b"1")
    store.put("a/three", b"333")
    after = time.time()
    for key, size in (("a/one", 1), ("a/three", 3)):
        info = store.stat(key)
        assert (info.key, info.size) == (key, size)
        # S3 records LastModified to the second; allow for the truncation.
        assert before - 2 <= info.mtime <= after + 2
    listed = {info.key: info for info in store.list("a/")}
    assert {key: info.size for key, info in listed.items()} == {"a/one": 1, "a/three": 3}
    assert listed["a/one"].mtime == pytest.approx(store.stat("a/one").mtime, abs=1)


def test_exists(store: ObjectStore) -> None:
    assert not store.exists("x/y")
    store.put("x/y", b"")
    assert store.exists("x/y")
    assert not store.exists("x")  # a prefix of a key is not an object
    store.delete("x/y")
    assert not store.exists("x/y")


def test_touch_moves_mtime_forward(store: ObjectStore) -> None:
    store.put("t", b"data")
    hour_ago = time.time() - 3600
    set_mtime(store, "t", hour_ago)
    assert store.stat("t").mtime == pytest.approx(hour_ago, abs=1)
    before_touch = time.time()
    store.touch("t")
    assert store.stat("t").mtime >= before_touch - 2
    assert store.get("t") == b"data"  # touching never changes the bytes


def test_touch_of_a_missing_key_is_not_found(store: ObjectStore) -> None:
    with pytest.raises(NotFoundError, match="'gone'"):
        store.touch("gone")
    assert keys_of(store) == []


# -- listing ------------------------------------------------------------------------------

# No key is a path prefix of another, which a file store cannot hold.
ORDER_KEYS = ["a-c", "a/b", "a/b0", "a0", "a.d", "ab/c", "b", "Z", "a b", "é", "z/ü", "~"]


def test_list_is_in_utf8_byte_order(store: ObjectStore) -> None:
    store.put_many((key, key.encode()) for key in reversed(ORDER_KEYS))
    expected = sorted(ORDER_KEYS, key=lambda k: k.encode())
    assert expected.index("a-c") < expected.index("a/b")  # '-' < '/' bytewise
    assert keys_of(store) == expected
    assert [info.size for info in store.list()] == [len(k.encode()) for k in expected]


def test_list_with_a_prefix_ending_mid_segment(store: ObjectStore) -> None:
    for key in ("refs/ab", "refs/abc/1", "refs/abd/2", "refs/b/1", "refs/a", "refsx"):
        store.put(key, b"")
    assert keys_of(store, "refs/ab") == ["refs/ab", "refs/abc/1", "refs/abd/2"]
    assert keys_of(store, "refs/abc") == ["refs/abc/1"]
    assert keys_of(store, "refs/abc/") == ["refs/abc/1"]
    assert keys_of(store, "refs") == [
        "refs/a",
        "refs/ab",
        "refs/abc/1",
        "refs/abd/2",
        "refs/b/1",
        "refsx",
    ]
    assert keys_of(store, "nothing") == []
    assert keys_of(store, "refs/abc/1/deeper") == []


def test_list_prefixes(store: ObjectStore) -> None:
    for key in ("refs/a/1", "refs/a/2", "refs/b/1", "refs/HEAD", "refs/a-b/1", "blocks/x"):
        store.put(key, b"")
    assert store.list_prefixes() == ["blocks", "refs"]
    assert store.list_prefixes("refs/") == ["HEAD", "a", "a-b", "b"]
    assert store.list_prefixes("refs/a/") == ["1", "2"]
    assert store.list_prefixes("none/") == []


def test_list_prefixes_wants_a_directory_prefix(store: ObjectStore) -> None:
    with pytest.raises(UsageError, match="ending with '/'"):
        store.list_prefixes("refs")


def test_list_rejects_a_non_string_prefix(store: ObjectStore) -> None:
    with pytest.raises(UsageError, match="prefix"):
        list(store.list(5))  # type: ignore[arg-type]


# -- deletes ----------------------------------------------------------------------------


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put("d/1", b"x")
    store.delete("d/1")
    store.delete("d/1")
    store.delete("never/there")
    assert not store.exists("d/1")
    with pytest.raises(NotFoundError):
        store.get("d/1")


def test_delete_many(store: ObjectStore) -> None:
    store.put_many((f"k/{i:03d}", b"v") for i in range(40))
    store.delete_many([f"k/{i:03d}" for i in range(0, 40, 2)] + ["k/missing", "k/000"])
    assert keys_of(store) == [f"k/{i:03d}" for i in range(1, 40, 2)]
    store.delete_many([])
    assert len(keys_of(store)) == 20


# -- bulk -------------------------------------------------------------------------------


def test_put_hint_is_an_atomic_put(store: ObjectStore) -> None:
    store.put_hint("refs/db/HEAD", b"1")
    store.put_hint("refs/db/HEAD", b"22")
    assert store.get("refs/db/HEAD") == b"22"
    assert [info.key for info in store.list("refs/")] == ["refs/db/HEAD"]
    with pytest.raises(UsageError):
        store.put_hint("refs/db/HEAD", "text")  # type: ignore[arg-type]


def test_put_many_and_get_many(store: ObjectStore) -> None:
    items = {f"blocks/{i:04d}": bytes([i % 256]) * (i + 1) for i in range(50)}
    store.put_many(items.items())
    assert store.get_many(list(items)) == items
    assert store.get_many([]) == {}


def test_get_many_names_a_missing_key(store: ObjectStore) -> None:
    store.put("here", b"1")
    with pytest.raises(NotFoundError, match="'absent'"):
        store.get_many(["here", "absent"])


def test_put_many_with_a_bad_item_writes_nothing(store: ObjectStore) -> None:
    store.put("keep", b"old")
    items: list[tuple[str, Any]] = [("keep", b"new"), ("b", b"x"), ("c", "not bytes")]
    with pytest.raises(UsageError, match="'c'"):
        store.put_many(items)
    with pytest.raises(UsageError):
        store.put_many([("keep", b"new"), ("/bad", b"x")])
    assert keys_of(store) == ["keep"]
    assert store.get("keep") == b"old"


def test_map_bulk_keeps_order(store: ObjectStore) -> None:
    assert store.map_bulk(lambda n: n * n, list(range(100))) == [n * n for n in range(100)]


def test_map_bulk_calls_each_item_once_and_raises_the_error(store: ObjectStore) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def square(n: int) -> int:
        with lock:
            seen.append(n)
        return n * n

    for size in (0, 1, 3, 7, 8, 9, 100, 1001):
        seen.clear()
        assert store.map_bulk(square, list(range(size))) == [n * n for n in range(size)]
        assert sorted(seen) == list(range(size))

    def fail_on_57(n: int) -> int:
        if n == 57:
            raise ValueError("item 57")
        return n

    with pytest.raises(ValueError, match="item 57"):
        store.map_bulk(fail_on_57, list(range(100)))


# -- put_if_absent ------------------------------------------------------------------------


def test_put_if_absent(store: ObjectStore) -> None:
    assert store.put_if_absent("refs/db/1", b"first") is True
    assert store.put_if_absent("refs/db/1", b"second") is False
    assert store.put_if_absent("refs/db/1", b"first") is False  # even with equal bytes
    assert store.get("refs/db/1") == b"first"
    store.delete("refs/db/1")
    assert store.put_if_absent("refs/db/1", b"third") is True
    assert store.get("refs/db/1") == b"third"


def test_put_if_absent_after_writes_the_items_then_the_key(store: ObjectStore) -> None:
    items = [(f"blocks/{i}", bytes([i]) * 100) for i in range(5)]
    assert store.put_if_absent_after(items, "refs/db/1", b"entry") is True
    assert store.get("refs/db/1") == b"entry"
    assert store.get_many([k for k, _ in items]) == dict(items)
    more = [("blocks/9", b"nine")]
    assert store.put_if_absent_after(more, "refs/db/1", b"other") is False
    assert store.get("refs/db/1") == b"entry"
    assert store.get("blocks/9") == b"nine"  # written whether or not the key was created
    assert store.put_if_absent_after([], "refs/db/2", b"alone") is True
    with pytest.raises(UsageError):
        store.put_if_absent_after([("/bad", b"x")], "refs/db/3", b"never")
    assert not store.exists("refs/db/3")
    assert not [k for k in keys_of(store) if k.startswith(".")]


def race_put_if_absent(store: ObjectStore, key: str, threads: int) -> dict[int, bool]:
    """Start ``threads`` conditional puts of ``key`` at once; each writer's result."""
    barrier = threading.Barrier(threads)
    results: dict[int, bool] = {}

    def contend(n: int) -> None:
        barrier.wait()
        results[n] = store.put_if_absent(key, f"writer-{n}".encode() * 100)

    workers = [threading.Thread(target=contend, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return results


def test_put_if_absent_raced_by_eight_threads(store: ObjectStore) -> None:
    with atomic_conditional_puts(store):
        for round_ in range(5):
            key = f"refs/race/{round_}"
            results = race_put_if_absent(store, key, 8)
            assert len(results) == 8
            winners = [n for n, won in results.items() if won]
            assert len(winners) == 1, f"round {round_}: winners {winners}"
            assert store.get(key) == f"writer-{winners[0]}".encode() * 100


# -- pickling -----------------------------------------------------------------------------


def test_a_pickled_store_opens_the_same_location(store: ObjectStore) -> None:
    store.put("shared/1", b"one")
    copy = pickle.loads(pickle.dumps(store))
    try:
        assert type(copy) is type(store)
        assert copy.uri == store.uri
        assert copy.get("shared/1") == b"one"
        copy.put("shared/2", b"two")
        assert store.get("shared/2") == b"two"
        assert copy.put_if_absent("shared/1", b"x") is False
    finally:
        copy.close()


# -- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", INVALID_KEYS, ids=repr)
def test_invalid_keys_are_usage_errors(store: ObjectStore, key: Any) -> None:
    calls: dict[str, Callable[[], object]] = {
        "put": lambda: store.put(key, b"x"),
        "put_if_absent": lambda: store.put_if_absent(key, b"x"),
        "put_many": lambda: store.put_many([(key, b"x")]),
        "get": lambda: store.get(key),
        "get_range": lambda: store.get_range(key, 0, 1),
        "stat": lambda: store.stat(key),
        "exists": lambda: store.exists(key),
        "touch": lambda: store.touch(key),
        "delete": lambda: store.delete(key),
        "delete_many": lambda: store.delete_many([key]),
    }
    accepted, unclear = [], []
    for name, call in calls.items():
        try:
            call()
        except UsageError as exc:
            if "key" not in str(exc):
                unclear.append(f"{name}: {exc}")
        else:
            accepted.append(name)
    assert accepted == []
    assert unclear == []
    assert keys_of(store) == []


@pytest.mark.parametrize("data", ["text", 5, None, [1, 2], {"a": 1}], ids=repr)
def test_non_bytes_data_is_a_usage_error(store: ObjectStore, data: Any) -> None:
    with pytest.raises(UsageError, match="'k'"):
        store.put("k", data)
    with pytest.raises(UsageError, match="'k'"):
        store.put_if_absent("k", data)
    assert not store.exists("k")


def test_missing_key_is_not_found_naming_the_key(store: ObjectStore) -> None:
    for call in (store.get, store.stat, store.touch):
        with pytest.raises(NotFoundError, match="'blocks/missing'") as caught:
            call("blocks/missing")
        assert isinstance(caught.value, KeyError)
        assert store.uri in str(caught.value)


def test_a_key_prefix_is_not_an_object(store: ObjectStore) -> None:
    store.put("dir/obj", b"x")
    with pytest.raises(NotFoundError):
        store.get("dir")
    with pytest.raises(NotFoundError):
        store.stat("dir")


# -- leftovers of killed writers ---------------------------------------------------------


def leave_temporary(store: ObjectStore, size: int, mtime: float) -> bool:
    """Leave what a writer killed mid-put leaves on this backend; False if it leaves nothing."""
    if isinstance(store, S3Store):
        from s3faults import set_moto_mtime

        probe = f".merkle-probe-{uuid.uuid4().hex}"  # check_conditional_writes' object
        store.client.put_object(Bucket=store.bucket, Key=store.prefix + probe, Body=b"x" * size)
        set_moto_mtime(store, probe, mtime)
        return True
    if isinstance(store, FileStore):
        path = os.path.join(store.root, "blocks", f".tmp-{uuid.uuid4().hex}")
        with open(path, "wb") as f:
            f.write(b"x" * size)
        os.utime(path, (mtime, mtime))
        return True
    return False


def test_remove_stale_temporaries_removes_old_leftovers_and_nothing_else(
    store: ObjectStore,
) -> None:
    objects = {"blocks/a": b"1", "refs/db/00000000000000000000": b"2", "config": b"3"}
    store.put_many(objects.items())
    now = time.time()
    leaves = leave_temporary(store, 100, now - 7200) and leave_temporary(store, 20, now - 7300)
    leave_temporary(store, 5, now)  # a write in progress

    assert store.remove_stale_temporaries(now - 3600) == ((2, 120) if leaves else (0, 0))
    assert store.remove_stale_temporaries(now - 3600) == (0, 0)
    assert store.get_many(list(objects)) == objects
    assert keys_of(store) == sorted(objects)
    assert store.remove_stale_temporaries(now + 60) == ((1, 5) if leaves else (0, 0))


def test_make_durable_of_present_objects_changes_nothing(store: ObjectStore) -> None:
    store.put_many([("blocks/a", b"1"), ("refs/db/0", b"2")])
    store.make_durable(["blocks/a", "refs/db/0"])
    store.make_durable([])
    assert store.get_many(["blocks/a", "refs/db/0"]) == {"blocks/a": b"1", "refs/db/0": b"2"}


# -- life cycle -------------------------------------------------------------------------


def test_context_manager_closes(store: ObjectStore) -> None:
    copy = pickle.loads(pickle.dumps(store))
    with copy as opened:
        assert opened is copy
        opened.put("c", b"1")
    assert store.get("c") == b"1"
