"""Fixtures for the command-line tests: a file lake, a runner bound to it, the Python API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import merkle

from .helpers import Run


@pytest.fixture
def lake_uri(tmp_path: Path) -> str:
    """A fresh file lake."""
    return (tmp_path / "lake").as_uri()


@pytest.fixture
def run(lake_uri: str) -> Run:
    return Run(lake_uri)


@pytest.fixture
def conn(lake_uri: str) -> Iterator[merkle.Connection]:
    """The Python API on the same lake, to compare the command's answers with."""
    with merkle.connect(lake_uri) as opened:
        yield opened


@pytest.fixture
def shop(conn: merkle.Connection) -> merkle.Database:
    """An empty database ``shop`` (test_commands.py makes its own, with tables)."""
    return conn.create_db("shop")
