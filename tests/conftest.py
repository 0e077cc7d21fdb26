"""Shared fixtures: lakes on every backend, and a moto S3 server over real HTTP.

``lake`` is parametrised over memory, file and S3, so a test written once runs
on every backend. ``shared_lake`` leaves out memory, for tests whose several
processes must see one lake. The S3 server is moto's ``ThreadedMotoServer`` on
127.0.0.1 with an ephemeral port, started once per session and stopped by the
fixture; each test gets a bucket of its own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from merkle.storage import ObjectStore, open_store

# Credentials for moto only; set before boto3 looks, inherited by child processes.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


@dataclass
class Lake:
    """A lake location for a test: its URI and the options ``open_store`` needs."""

    kind: str
    uri: str
    options: dict[str, Any] = field(default_factory=dict)

    def open(self) -> ObjectStore:
        return open_store(self.uri, **self.options)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """URL of a moto S3 server on 127.0.0.1, stopped at the end of the session."""
    import logging

    from moto.server import ThreadedMotoServer
    from s3faults import moto_atomic_conditional_puts

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        # Real S3 decides If-None-Match atomically; moto checks then writes. Serialise
        # its PutObject so race tests test merkle, not moto.
        with moto_atomic_conditional_puts():
            yield f"http://{host}:{port}"
    finally:
        server.stop()


def new_bucket(endpoint: str) -> str:
    """Create an empty bucket with a unique name on the moto server."""
    import boto3

    name = f"test-{uuid.uuid4().hex[:20]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


def make_lake(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Lake:
    if kind == "memory":
        return Lake(kind, f"memory://test-{uuid.uuid4().hex}")
    if kind == "file":
        return Lake(kind, (tmp_path / "lake").as_uri())
    endpoint = request.getfixturevalue("moto_endpoint")
    bucket = new_bucket(endpoint)
    return Lake(kind, f"s3://{bucket}/lake", {"endpoint_url": endpoint, "region_name": "us-east-1"})


@pytest.fixture(params=["memory", "file", pytest.param("s3", marks=pytest.mark.s3)])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    """A fresh, empty lake on each backend."""
    return make_lake(request.param, tmp_path, request)


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def shared_lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    """A fresh lake that several processes can open (file and S3 only)."""
    return make_lake(request.param, tmp_path, request)


@pytest.fixture
def store(lake: Lake) -> Iterator[ObjectStore]:
    """An open ObjectStore on a fresh lake, closed after the test."""
    with lake.open() as opened:
        yield opened
