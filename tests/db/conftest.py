"""Fixtures of the database API tests: connections that are closed after the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from conftest import Lake

import merkle

Connect = Callable[[Lake], merkle.Connection]


@pytest.fixture
def connect() -> Iterator[Connect]:
    """A factory of connections to a lake; every one is closed at teardown.

    Several connections to one lake stand for several clients (on memory://
    too: the fixture's memory lake is a named store, shared in the process).
    """
    conns: list[merkle.Connection] = []

    def factory(lake: Lake) -> merkle.Connection:
        conn = merkle.connect(lake.uri, **lake.options)
        conns.append(conn)
        return conn

    yield factory
    for conn in conns:
        conn.close()


@pytest.fixture
def conn(lake: Lake, connect: Connect) -> merkle.Connection:
    """A connection to the test's lake (on every backend)."""
    return connect(lake)
