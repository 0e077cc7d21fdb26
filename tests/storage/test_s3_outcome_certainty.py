"""Whether a failed write could have taken effect: judged right, reported right, acted on.

``StorageError.definite`` (and ``CommitIndeterminateError``) must say "surely
not done" only when that is so, and must not say "may have happened" of a
commit whose journal entry was never sent:

* a botocore error counts as "nothing was sent" only if it surely came before
  any byte of the request went out (a TLS error on the answer of a conditional
  put that landed made one commit land twice);
* a conditional put whose read-back fails is indeterminate, not the read's
  definite error;
* a block write or block refresh that fails uncertainly before the entry is
  definite as to the commit.

S3 tests talk HTTP to the session's moto server; faults are injected on the
store's own boto3 client (``before-send``), as in ``tests/s3faults.py``.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3.exceptions
from botocore.awsrequest import AWSPreparedRequest
from botocore.exceptions import (
    ChecksumError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ProxyConnectionError,
    ReadTimeoutError,
    ResponseStreamingError,
    SSLError,
)
from botocore.httpsession import URLLib3Session
from conftest import make_lake
from s3faults import inject_s3_faults, set_moto_mtime

import merkle
from merkle.db.connection import Connection
from merkle.errors import CommitIndeterminateError, StorageError
from merkle.refs.gclock import LOCK_PREFIX
from merkle.storage.file import FileStore
from merkle.storage.s3 import S3Store
from merkle.storage.s3_retry import classify

URL = "https://127.0.0.1:9/lake/p/refs/db/00000000000000000001"


def _tls_error(problem: ssl.SSLError) -> SSLError:
    """botocore's SSLError as httpsession raises it: around urllib3's, around ssl's."""
    return SSLError(endpoint_url=URL, error=urllib3.exceptions.SSLError(problem))


def _proxy_error(cause: BaseException) -> ProxyConnectionError:
    proxy = urllib3.exceptions.ProxyError("Unable to connect to proxy", cause)
    return ProxyConnectionError(proxy_url="http://proxy:3128", error=proxy)


BAD_RECORD_MAC = ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC] bad record mac")
CERT_REFUSED = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] self-signed")

# (exception, definite): definite only where no byte of the request can have gone out.
JUDGED: list[tuple[str, BaseException, bool]] = [
    ("refused", EndpointConnectionError(endpoint_url=URL), True),
    ("connect timeout", ConnectTimeoutError(endpoint_url=URL), True),
    ("certificate refused", _tls_error(CERT_REFUSED), True),
    (
        "proxy unreachable",
        _proxy_error(urllib3.exceptions.NewConnectionError(None, "refused")),  # type: ignore[arg-type]
        True,
    ),
    ("TLS record damaged", _tls_error(BAD_RECORD_MAC), False),
    ("TLS eof", _tls_error(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")), False),
    ("proxied connection reset", _proxy_error(ConnectionResetError(104, "reset")), False),
    ("read timeout", ReadTimeoutError(endpoint_url=URL), False),
    ("connection closed", ConnectionClosedError(endpoint_url=URL), False),
    ("body cut off", ResponseStreamingError(error="IncompleteRead"), False),
    (
        "response checksum",
        ChecksumError(checksum_type="crc32", expected_checksum=1, actual_checksum=2),
        False,
    ),
]


@pytest.mark.parametrize(
    ("exc", "definite"), [(e, d) for _, e, d in JUDGED], ids=[n for n, _, _ in JUDGED]
)
def test_only_errors_before_sending_are_definite(exc: BaseException, definite: bool) -> None:
    failure = classify(exc)
    assert failure.definite is definite
    assert failure.retryable


# -- S3: faults on the store's own client -----------------------------------------------


@pytest.fixture
def lake_conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connection]:
    """A connection to a fresh S3 lake: three attempts per request, no waiting."""
    lake = make_lake("s3", tmp_path, request)
    conn = merkle.connect(lake.uri, **lake.options, max_attempts=3, retry_base_delay=0)
    try:
        yield conn
    finally:
        conn.close()


def _s3(conn: Connection) -> S3Store:
    store = conn.store
    assert isinstance(store, S3Store)
    return store


def _hook(
    store: S3Store, operation: str, fault: Callable[[AWSPreparedRequest], BaseException | None]
) -> list[str]:
    """Send every ``operation`` request; then raise what ``fault`` returns (the request
    reached the server: its answer is what is lost). The paths of the requests seen."""
    sender = URLLib3Session()
    seen: list[str] = []

    def before_send(request: AWSPreparedRequest, **_: Any) -> Any:
        seen.append(request.url.split("?")[0])
        error = fault(request)
        if error is None:
            return None
        _ = sender.send(request).content  # it lands ...
        raise error  # ... its answer is lost

    store.client.meta.events.register_first(f"before-send.s3.{operation}", before_send)
    return seen


def _once(match: str, error: Callable[[], BaseException]) -> Callable[..., BaseException | None]:
    fired = [False]

    def fault(request: AWSPreparedRequest) -> BaseException | None:
        if fired[0] or match not in request.url:
            return None
        fired[0] = True
        return error()

    return fault


@pytest.mark.s3
def test_tls_error_on_the_answer_of_a_conditional_put_is_read_back(
    lake_conn: Connection,
) -> None:
    store = _s3(lake_conn)
    _hook(store, "PutObject", _once("/refs/x/", lambda: _tls_error(BAD_RECORD_MAC)))
    assert store.put_if_absent("refs/x/1", b"mine")  # the retry's 412 is read back: ours
    assert store.get("refs/x/1") == b"mine"


@pytest.mark.s3
def test_commit_whose_entry_answer_meets_a_tls_error_lands_once(lake_conn: Connection) -> None:
    db = lake_conn.create_db("shop", metadata={"counter": 0})
    db = db.create_table("t", key="id").commit()
    _hook(
        _s3(lake_conn),
        "PutObject",
        _once("/refs/shop/0000000000000000000", lambda: _tls_error(BAD_RECORD_MAC)),
    )
    done = db.alter_db_meta(lambda m: {**m, "counter": m["counter"] + 1}).commit(message="once")
    assert done.version == db.version + 1
    history = lake_conn.history("shop")
    assert [e.message for e in history].count("once") == 1
    assert lake_conn.open_db("shop").metadata == {"counter": 1}


@pytest.mark.s3
def test_lease_put_meeting_a_tls_error_is_its_own(lake_conn: Connection) -> None:
    _hook(_s3(lake_conn), "PutObject", _once("/leases/", lambda: _tls_error(BAD_RECORD_MAC)))
    lease = lake_conn.leases.acquire_writer(60.0, db="shop")  # once IntegrityError: uuid4 collided
    assert lake_conn.leases.is_valid(lease)
    lake_conn.leases.release(lease)


@pytest.mark.s3
def test_gc_lock_put_meeting_a_tls_error_is_its_own(lake_conn: Connection) -> None:
    lake_conn.create_db("shop").create_table("t", key="id").commit()
    _hook(_s3(lake_conn), "PutObject", _once(f"/{LOCK_PREFIX}", lambda: _tls_error(BAD_RECORD_MAC)))
    merkle.gc(lake_conn, writer_wait=5.0)  # once a wait for its own lock, then LockHeldError


@pytest.mark.s3
def test_conditional_put_whose_read_back_fails_is_indeterminate(lake_conn: Connection) -> None:
    store = _s3(lake_conn)
    key = "refs/x/1"
    with (
        inject_s3_faults(store, "PutObject", kind="connection", key=key),  # lands, answer lost
        inject_s3_faults(store, "GetObject", kind="5xx", times=3, key=key),
        pytest.raises(StorageError, match="reading it back") as caught,
    ):
        store.put_if_absent(key, b"mine")
    assert caught.value.definite is False
    assert store.get(key) == b"mine"


@pytest.mark.s3
def test_commit_whose_read_back_fails_is_indeterminate_not_definite(
    lake_conn: Connection,
) -> None:
    db = lake_conn.create_db("shop", metadata={"counter": 0}).create_table("t", key="id").commit()
    store, entry = _s3(lake_conn), f"refs/shop/{db.version + 1:020d}"
    change = db.alter_db_meta(lambda m: {**m, "counter": m["counter"] + 1})
    with (
        inject_s3_faults(store, "PutObject", kind="connection", key=entry),
        inject_s3_faults(store, "GetObject", kind="5xx", times=100, key=entry),
        pytest.raises(CommitIndeterminateError),
    ):
        change.commit(message="increment")
    assert lake_conn.open_db("shop").metadata == {"counter": 1}  # it had landed


@pytest.mark.s3
def test_block_puts_lost_every_time_fail_the_commit_definitely(lake_conn: Connection) -> None:
    db = lake_conn.create_db("shop").create_table("t", key="id").write("t", [{"id": 1}]).commit()
    seen = _hook(
        _s3(lake_conn),
        "PutObject",
        lambda r: ConnectionClosedError(endpoint_url=r.url) if "/blocks/" in r.url else None,
    )
    with pytest.raises(StorageError) as caught:
        db.write("t", [{"id": 2}]).commit(message="two")
    error = caught.value
    assert not isinstance(error, CommitIndeterminateError)
    assert error.definite is True
    assert "blocks/" in str(error)
    assert "may or may not be stored" in str(error)
    assert not [path for path in seen if "/refs/" in path]  # no entry was sent
    assert lake_conn.open_db("shop").version == db.version


@pytest.mark.s3
def test_put_if_absent_after_with_lost_items_is_definite_as_to_the_key(
    lake_conn: Connection,
) -> None:
    store = _s3(lake_conn)
    _hook(
        store,
        "PutObject",
        lambda r: ReadTimeoutError(endpoint_url=r.url) if "/blocks/" in r.url else None,
    )
    with pytest.raises(StorageError, match=r"'refs/x/1'.*was not written") as caught:
        store.put_if_absent_after([("blocks/b1", b"block")], "refs/x/1", b"entry")
    assert caught.value.definite is True
    assert not store.exists("refs/x/1")


@pytest.mark.s3
def test_failed_refresh_of_a_reused_block_fails_the_commit_definitely(
    lake_conn: Connection,
) -> None:
    rows = [{"id": 1, "v": "x"}]
    db = lake_conn.create_db("shop").create_table("t", key="id").write("t", rows).commit()
    store = _s3(lake_conn)
    old = time.time() - 86400
    for info in list(store.list("blocks/")):
        set_moto_mtime(store, info.key, old)  # a block reused must be refreshed
    with (
        inject_s3_faults(store, "CopyObject", kind="connection", times=1000) as faults,
        pytest.raises(StorageError) as caught,
    ):  # the same rows in another table: their page is there, refreshed, not written
        db.create_table("u", key="id").write("u", rows).commit(message="reuse")
    assert faults.sent > 0
    assert caught.value.definite is True
    assert not isinstance(caught.value, CommitIndeterminateError)
    assert "nothing was committed" in str(caught.value)
    assert lake_conn.open_db("shop").version == db.version


# -- the file store keeps the same split --------------------------------------------------


def test_file_put_if_absent_after_with_half_published_items_is_definite(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.replace
    calls = [0]

    def replace(src: Any, dst: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:  # the first item is in place, the second fails
            raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr("merkle.storage.file.os.replace", replace)
    with pytest.raises(StorageError, match=r"'refs/x/1'.*was not written") as caught:
        file_store.put_if_absent_after(
            [("blocks/b1", b"one"), ("blocks/b2", b"two")], "refs/x/1", b"entry"
        )
    assert caught.value.definite is True
    assert not file_store.exists("refs/x/1")
