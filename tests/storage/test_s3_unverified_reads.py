"""Lake objects that are not content-addressed, read from S3 without response checksums.

S3-compatible stores are usually run with ``AWS_RESPONSE_CHECKSUM_VALIDATION=
when_required``: botocore then checks no response body. Blocks are checked
against their CIDs; journal entries, ``TRIMMED``, the config and the rest were
taken as read. A byte flipped on the way became permanent journal damage (the
next commit chained the damaged entry's digest), was reported as damage at
rest, and a ``TRIMMED`` read so made GC delete versions its retention keeps.
Now such a body is checked against its ETag (the MD5 of a single-part put),
read again when that fails, and GC confirms a floor before it trims to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import new_bucket
from s3faults import inject_s3_faults

import merkle
from merkle.errors import StorageError
from merkle.refs.errors import JournalEntryDamagedError
from merkle.storage import open_store
from merkle.storage.s3 import S3Store

pytestmark = pytest.mark.s3

ENTRY_1 = "refs/shop/00000000000000000001"


@pytest.fixture
def unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Botocore checks no response checksum (as set for S3-compatible stores)."""
    monkeypatch.setenv("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")


@pytest.fixture
def options(moto_endpoint: str) -> dict[str, Any]:
    return {
        "endpoint_url": moto_endpoint,
        "region_name": "us-east-1",
        "max_attempts": 3,
        "retry_base_delay": 0,
    }


@pytest.fixture
def uri(moto_endpoint: str) -> str:
    return f"s3://{new_bucket(moto_endpoint)}/lake"


def _s3(conn: merkle.Connection) -> S3Store:
    assert isinstance(conn.store, S3Store)
    return conn.store


def _flip(marker: bytes) -> Callable[[bytes], bytes]:
    """A damage that flips one bit inside ``marker``: the body still decodes."""

    def damage(body: bytes) -> bytes:
        out = bytearray(body)
        out[body.index(marker) + 3] ^= 1
        return bytes(out)

    return damage


@contextmanager
def _counting_gets(store: S3Store, key: str) -> Iterator[list[str]]:
    """The GetObject requests of ``key`` sent while the block runs."""
    seen: list[str] = []

    def count(request: Any, **_: Any) -> None:
        if request.url.split("?")[0].endswith("/" + key):
            seen.append(request.url)

    events = store.client.meta.events
    events.register("before-send.s3.GetObject", count, unique_id="count-gets")
    try:
        yield seen
    finally:
        events.unregister("before-send.s3.GetObject", unique_id="count-gets")


def _one_commit(uri: str, options: dict[str, Any]) -> None:
    with merkle.connect(uri, **options) as conn:
        db = conn.create_db("shop").create_table("t", key="id")
        db.write("t", [{"id": 1}]).commit(message="MMMMMMMM")


def _healthy(uri: str, options: dict[str, Any]) -> None:
    """The lake verifies and collects: no journal damage was made."""
    with merkle.connect(uri, **options) as check:
        report = merkle.verify(check)
        assert report.journals_damaged == []
        merkle.gc(check, grace="0s")  # raises JournalDamagedError on a damaged journal


def test_an_entry_damaged_on_the_way_is_not_chained_into_the_next_commit(
    unchecked: None, uri: str, options: dict[str, Any]
) -> None:
    """Before: the commit's prev was the digest of the damaged bytes; verify then reported
    "entry 2 was not built on the entry 1 stored below it" and every gc refused to run."""
    _one_commit(uri, options)
    with merkle.connect(uri, **options) as conn:
        with inject_s3_faults(
            _s3(conn), "GetObject", kind="damaged", key=ENTRY_1, damage=_flip(b"MMMMMMMM")
        ) as faults:
            db = conn.open_db("shop").write("t", [{"id": 2}]).commit(message="next")
        assert faults.fired == 1
        assert db.version == 2
    _healthy(uri, options)


def test_history_never_returns_an_entry_damaged_on_the_way(
    unchecked: None, uri: str, options: dict[str, Any]
) -> None:
    """Before: history() returned the entry with its message altered, silently."""
    _one_commit(uri, options)
    with merkle.connect(uri, **options) as conn:
        conn.history("shop")  # the head is known now: the next history reads its slot once
        with inject_s3_faults(
            _s3(conn), "GetObject", kind="damaged", key=ENTRY_1, damage=_flip(b"MMMMMMMM")
        ) as faults:
            messages = [entry.message for entry in conn.history("shop")]
        assert faults.fired == 1
        assert messages == ["MMMMMMMM", None]  # the commit, then the creation


@pytest.mark.parametrize("key", [ENTRY_1, "config"])
def test_a_read_damaged_on_the_way_is_not_reported_as_damage_at_rest(
    unchecked: None, uri: str, options: dict[str, Any], key: str
) -> None:
    """Before: a flipped byte in the head entry (or the lake config) was reported as an
    object damaged at rest, "restore it from a backup", though the stored object was whole."""
    _one_commit(uri, options)
    store = open_store(uri, **options)
    assert isinstance(store, S3Store)
    with (
        inject_s3_faults(store, "GetObject", kind="damaged", key=key) as faults,
        merkle.Connection(store) as conn,  # reads the config, then the head entry
    ):
        rows = conn.open_db("shop").to_arrow("t").to_pylist()
    assert faults.fired == 1
    assert rows == [{"id": 1}]


def test_bodies_that_differ_on_every_read_are_a_storage_error(
    unchecked: None, uri: str, options: dict[str, Any]
) -> None:
    """Damaged differently on every read: a StorageError (retryable, nothing changed),
    never the damaged bytes. Before: the first damaged body was returned."""
    _one_commit(uri, options)
    with merkle.connect(uri, **options) as conn:
        store = _s3(conn)
        whole = store.get(ENTRY_1)
        reads = iter(range(1, 100))

        def damage(body: bytes) -> bytes:  # a different flip on each read
            out = bytearray(body)
            out[next(reads) % len(body)] ^= 1
            return bytes(out)

        with (
            inject_s3_faults(
                store, "GetObject", kind="damaged", key=ENTRY_1, times=100, damage=damage
            ) as faults,
            pytest.raises(StorageError, match="damaged on the way") as caught,
        ):
            store.get(ENTRY_1)
        assert caught.value.definite
        assert faults.fired == 3  # max_attempts reads, none confirmed, no two alike
        assert store.get(ENTRY_1) == whole


def test_an_entry_damaged_at_rest_is_still_damage(
    unchecked: None, uri: str, options: dict[str, Any]
) -> None:
    """Bytes that read the same every time are the object: damage at rest stays the
    documented JournalEntryDamagedError (a guard: the check must not hide it)."""
    _one_commit(uri, options)
    with merkle.connect(uri, **options) as conn:
        store = _s3(conn)
        store.put(ENTRY_1, b"\xa1" + store.get(ENTRY_1)[1:])
        with pytest.raises(JournalEntryDamagedError):
            conn.history("shop")


@contextmanager
def _foreign_etags(store: S3Store) -> Iterator[list[int]]:
    """Every GetObject answer's ETag replaced by 32 hex digits that are no MD5."""
    seen = [0]

    def replace(response_dict: dict[str, Any], **_: Any) -> None:
        response_dict["headers"]["ETag"] = '"' + "0123456789abcdef" * 2 + '"'
        seen[0] += 1

    events = store.client.meta.events
    events.register_first("before-parse.s3.GetObject", replace, unique_id="foreign-etag")
    try:
        yield seen
    finally:
        events.unregister("before-parse.s3.GetObject", unique_id="foreign-etag")


@pytest.mark.parametrize(("validation", "reads"), [("when_required", 2), ("when_supported", 1)])
def test_a_store_whose_etags_are_not_md5s_is_trusted_on_two_equal_reads(
    uri: str,
    options: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    validation: str,
    reads: int,
) -> None:
    """An ETag that is no MD5 (SSE-KMS, some stores): the same bytes read twice are
    trusted, at the cost of a second GET, unless botocore checked the object's CRC32
    (when_supported). Blocks, checked against their CIDs, are read once."""
    monkeypatch.setenv("AWS_RESPONSE_CHECKSUM_VALIDATION", validation)
    _one_commit(uri, options)
    with merkle.connect(uri, **options) as conn:
        store = _s3(conn)
        whole = store.get(ENTRY_1)
        block = next(info.key for info in store.list("blocks/"))
        with _foreign_etags(store), _counting_gets(store, ENTRY_1) as gets:
            assert store.get(ENTRY_1) == whole
        assert len(gets) == reads
        with _foreign_etags(store), _counting_gets(store, block) as gets:
            store.get(block)
        assert len(gets) == 1


def _trimmed_lake(uri: str, options: dict[str, Any]) -> list[int]:
    """Eight versions, trimmed once to 3..8 (TRIMMED = 3); the stored policy keeps all."""
    with merkle.connect(uri, **options) as conn:
        db = conn.create_db("shop").create_table("t", key="id")
        for v in range(8):
            db = db.write("t", {1: {"v": f"version {v}"}}).commit(message=f"v{v}")
        merkle.gc(conn, keep_versions=6, grace="0s")
        assert conn.store.get("refs/shop/TRIMMED") == b"3"
        return [entry.version for entry in conn.history("shop")]


def _five(body: bytes) -> bytes:
    return body.replace(b"3", b"5")


@pytest.mark.parametrize("etag_follows", [False, True], ids=["etag-stale", "etag-follows"])
def test_a_floor_misread_does_not_make_gc_trim_versions_retention_keeps(
    unchecked: None, uri: str, options: dict[str, Any], etag_follows: bool
) -> None:
    """Before: one read of TRIMMED giving 5 for 3 made gc raise the floor to 5 and delete
    versions 3 and 4 for good. With the ETag stale the store reads again; with an answer
    whose ETag matches the wrong bytes (nothing gives it away), the collection's audit
    reads the floor again before it trusts a floor with entries below it."""
    before = _trimmed_lake(uri, options)
    assert before == [8, 7, 6, 5, 4, 3]
    with merkle.connect(uri, **options) as conn:
        with inject_s3_faults(
            _s3(conn),
            "GetObject",
            kind="damaged",
            key="refs/shop/TRIMMED",
            damage=_five,
            etag_follows=etag_follows,
        ) as faults:
            report = merkle.gc(conn, grace="0s")
        assert faults.fired == 1
        # (blocks the one-off trim left to a later run, inside its second, may be freed)
        assert report.databases["shop"].oldest_kept == 3
        assert report.databases["shop"].versions_trimmed == 0
    with merkle.connect(uri, **options) as check:
        assert [entry.version for entry in check.history("shop")] == before
        assert check.store.get("refs/shop/TRIMMED") == b"3"
