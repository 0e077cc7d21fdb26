"""Fixtures of the Spark tests: one local[2] session for the whole run, lakes it can reach.

The session is started once (Spark takes seconds to start) with its Python
workers on this interpreter and bound to 127.0.0.1, and stopped at the end.
Lakes are on local files and on S3 (the moto server of tests/conftest.py,
which workers reach over HTTP at 127.0.0.1: the endpoint travels in the
store options). A machine without Java fails these tests with one message
saying so (and ``make test`` stops before them with the same message).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Lake, make_lake

import merkle

JAVA_MISSING = (
    "the Spark tests need Java 17 or newer (java on PATH or JAVA_HOME): install a JDK "
    "(e.g. apt-get install openjdk-17-jre-headless)"
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every Spark test in one xdist group (``make test`` runs ``--dist loadgroup``): one
    worker starts the one JVM, instead of every worker starting its own. It runs before
    xdist's own hook, which reads the group marks: after it, a mark added here was
    ignored and both workers ran Spark tests, each with a JVM of its own."""
    for item in items:
        if "tests/spark/" in item.nodeid:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the merkle data source registered."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail(JAVA_MISSING, pytrace=False)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    import merkle.spark

    session = merkle.spark.local_session(
        2,
        "merkle-tests",
        spark__sql__shuffle__partitions="4",
        spark__default__parallelism="2",
        spark__driver__memory="1g",
    )
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(params=["file", pytest.param("s3", marks=pytest.mark.s3)])
def spark_lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    """A fresh lake on local files or on S3 (moto over HTTP), reachable from Spark workers."""
    return make_lake(request.param, tmp_path, request)


@pytest.fixture
def file_lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    """A fresh lake on local files (for tests that need only one backend)."""
    return make_lake("file", tmp_path, request)


@pytest.fixture
def lake_conn() -> Iterator[Callable[[Lake], merkle.Connection]]:
    """A factory of connections to test lakes, closed at teardown."""
    conns: list[merkle.Connection] = []

    def factory(lake: Lake) -> merkle.Connection:
        conn = merkle.connect(lake.uri, **lake.options)
        conns.append(conn)
        return conn

    yield factory
    for conn in conns:
        conn.close()
