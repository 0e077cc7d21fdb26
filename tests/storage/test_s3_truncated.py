"""S3 responses cut off on the way are failures to retry, never answers.

A proxy or load balancer that closes a connection inside a response's headers
left botocore a 200 with an empty body (an empty object, an empty listing: GC
then freed a live database's blocks) or a header cut mid-value (a raw
``ValueError``). Here a small TCP proxy in front of the session's moto server
cuts chosen responses at chosen points; the store must retry them and, if
every attempt is cut, raise a :class:`StorageError` naming the key and the
endpoint.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from aging import settle
from conftest import new_bucket

import merkle
from merkle.errors import StorageError, UsageError
from merkle.storage import open_store
from merkle.storage.s3 import S3Store

pytestmark = pytest.mark.s3

Cut = Callable[[bytes], int]


def _before_header(name: bytes) -> Cut:
    """Cut just before the header line ``name`` (so it and all after it are lost)."""
    return lambda head: head.lower().index(b"\r\n" + name.lower() + b":") + 2


def _inside_header(name: bytes) -> Cut:
    """Cut one character into the value of header ``name``."""
    return lambda head: head.lower().index(b"\r\n" + name.lower() + b": ") + len(name) + 5


def _after_headers(head: bytes) -> int:
    """Cut after the blank line that ends the headers: the body is lost."""
    return head.index(b"\r\n\r\n") + 4


CUTS: dict[str, Cut] = {
    "before Content-Length": _before_header(b"Content-Length"),
    "inside Last-Modified": _inside_header(b"Last-Modified"),
    "after the headers": _after_headers,
}


class CutProxy:
    """A TCP proxy to ``target`` that cuts the responses to chosen requests.

    :meth:`arm` picks the next ``times`` requests whose first bytes start with
    ``match``; their responses are sent up to ``cut(head)`` (``head``: the
    response up to and including its blank line) and the connection is closed,
    as a proxy or load balancer closing it early would.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.match = b""
        self.cut: Cut = _after_headers
        self.remaining = 0
        self.hits = 0
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._spawn(self._accept)

    def arm(self, match: bytes, cut: Cut, times: int = 1) -> None:
        with self._lock:
            self.match, self.cut, self.remaining, self.hits = match, cut, times, 0

    def close(self) -> None:
        _shut(self._listener)  # shutdown() wakes the thread blocked in accept()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)
        for thread in self._threads:
            thread.join(timeout=5)

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                return
            with self._lock:
                self._sockets += [client, upstream]
            state = {"cut": None}
            self._spawn(self._requests, client, upstream, state)
            self._spawn(self._responses, upstream, client, state)

    def _requests(self, client: socket.socket, upstream: socket.socket, state: dict) -> None:
        try:
            while data := client.recv(65536):
                with self._lock:
                    if self.remaining and self.match and data.startswith(self.match):
                        self.remaining -= 1
                        self.hits += 1
                        state["cut"] = self.cut
                upstream.sendall(data)
        except OSError:
            pass

    def _responses(self, upstream: socket.socket, client: socket.socket, state: dict) -> None:
        buffer = b""
        try:
            while data := upstream.recv(65536):
                cut = state["cut"]
                if cut is None:
                    client.sendall(data)
                    continue
                buffer += data
                if b"\r\n\r\n" in buffer:
                    head = buffer[: buffer.index(b"\r\n\r\n") + 4]
                    client.sendall(buffer[: cut(head)])
                    break
        except OSError:
            pass
        _shut(upstream)
        _shut(client)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[CutProxy]:
    cutter = CutProxy(urlsplit(moto_endpoint).port or 80)
    try:
        yield cutter
    finally:
        cutter.close()


@pytest.fixture
def bucket(moto_endpoint: str) -> str:
    return new_bucket(moto_endpoint)


def through(proxy: CutProxy, bucket: str, **options: Any) -> S3Store:
    """A store on ``bucket`` whose requests go through ``proxy``; quick retries."""
    options = {"region_name": "us-east-1", "max_attempts": 3, "retry_base_delay": 0, **options}
    store = open_store(
        f"s3://{bucket}/lake", endpoint_url=f"http://127.0.0.1:{proxy.port}", **options
    )
    assert isinstance(store, S3Store)
    return store


# operation -> (request line it sends, what it does, the cuts the old code took for answers)
OPERATIONS: dict[str, tuple[str, Callable[[S3Store], Any], tuple[str, ...]]] = {
    "get": (
        "GET /{bucket}/lake/refs/d/1",
        lambda s: s.get("refs/d/1"),
        ("before Content-Length", "inside Last-Modified"),
    ),
    "get_range": (
        "GET /{bucket}/lake/refs/d/1",
        lambda s: s.get_range("refs/d/1", 1, 3),
        ("before Content-Length", "inside Last-Modified"),
    ),
    "stat": (
        "HEAD /{bucket}/lake/refs/d/1",
        lambda s: s.stat("refs/d/1").size,
        ("before Content-Length", "inside Last-Modified"),
    ),
    "list": (
        "GET /{bucket}?list-type=2",
        lambda s: [i.key for i in s.list("")],
        ("before Content-Length", "after the headers"),
    ),
    "list_prefixes": (
        "GET /{bucket}?list-type=2",
        lambda s: s.list_prefixes("refs/"),
        ("before Content-Length", "after the headers"),
    ),
}

CASES = [(op, cut) for op, (_, _, cuts) in OPERATIONS.items() for cut in cuts]


def _seeded(moto_endpoint: str, bucket: str, run: Callable[[S3Store], Any]) -> Any:
    """One journal object in the lake, put directly; what ``run`` answers there uncut."""
    with open_store(
        f"s3://{bucket}/lake", endpoint_url=moto_endpoint, region_name="us-east-1"
    ) as direct:
        direct.put("refs/d/1", b"journal entry")
        return run(direct)


@pytest.mark.parametrize(("operation", "cut"), CASES)
def test_a_cut_response_is_retried_not_taken_for_an_answer(
    proxy: CutProxy, moto_endpoint: str, bucket: str, operation: str, cut: str
) -> None:
    line, run, _ = OPERATIONS[operation]
    expected = _seeded(moto_endpoint, bucket, run)
    with through(proxy, bucket) as store:
        proxy.arm(line.format(bucket=bucket).encode(), CUTS[cut], times=1)
        assert run(store) == expected
    assert proxy.hits == 1


@pytest.mark.parametrize(("operation", "cut"), CASES)
def test_responses_cut_on_every_attempt_are_a_storage_error(
    proxy: CutProxy, moto_endpoint: str, bucket: str, operation: str, cut: str
) -> None:
    line, run, _ = OPERATIONS[operation]
    _seeded(moto_endpoint, bucket, run)
    with through(proxy, bucket, max_attempts=2) as store:
        proxy.arm(line.format(bucket=bucket).encode(), CUTS[cut], times=2)
        with pytest.raises(StorageError, match="cut off or malformed") as caught:
            run(store)
    message = str(caught.value)
    assert "after 2 attempts" in message
    assert f"127.0.0.1:{proxy.port}" in message
    assert (
        ("refs/d/1" in message)
        if operation in ("get", "get_range", "stat")
        else ("list" in message)
    )
    assert proxy.hits == 2


def test_gc_keeps_a_live_database_when_its_refs_listings_are_cut(
    proxy: CutProxy, moto_endpoint: str, bucket: str
) -> None:
    uri = f"s3://{bucket}/lake"
    direct = merkle.connect(uri, endpoint_url=moto_endpoint, region_name="us-east-1")
    direct.create_db("d").create_table("t", key="id").write(
        "t", [{"id": i} for i in range(20)]
    ).commit()
    settle(direct)  # every block older than the grace period
    flaky = merkle.connect(
        uri,
        endpoint_url=f"http://127.0.0.1:{proxy.port}",
        region_name="us-east-1",
        retry_base_delay=0,
    )
    # GC lists refs/ twice (mark, then re-mark); both answers lose their headers' tail.
    proxy.arm(
        f"GET /{bucket}?list-type=2&prefix=lake%2Frefs%2F&delimiter".encode(),
        CUTS["before Content-Length"],
        times=2,
    )
    report = merkle.gc(flaky, grace="0s")
    assert proxy.hits == 2
    assert "freed 0 blocks" in report.summary()
    check = merkle.connect(uri, endpoint_url=moto_endpoint, region_name="us-east-1")
    assert merkle.verify(check).ok
    assert check.open_db("d").to_arrow("t").num_rows == 20


@pytest.mark.parametrize(
    "uri",
    [
        "s3://AKIAEXAMPLE:TOPSECRET@my-bucket/lake",
        "s3://TOPSECRET@my-bucket",
        "s3://AKIAEXAMPLE:TOPSECRET@my-bucket/lake?region=x",
        "s3://AKIAEXAMPLE:TOPSECRET@Bad_Bucket/lake",
    ],
)
def test_credentials_in_the_uri_are_refused_and_never_echoed(uri: str) -> None:
    with pytest.raises(UsageError) as caught:
        merkle.connect(uri, endpoint_url="http://127.0.0.1:9")
    message = str(caught.value)
    assert "TOPSECRET" not in message
    assert "AKIAEXAMPLE" not in message
    assert "credentials do not go in the URI" in message
    assert "aws_access_key_id" in message
    assert "AWS_ACCESS_KEY_ID" in message
