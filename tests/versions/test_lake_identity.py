"""Which lake is which: an equal URI on another S3 endpoint, or another unnamed memory lake.

Before: lakes were told apart by URI alone. A bucket ``lake`` on a production
server and one of the same name on a backup server were one lake: a clone
"of prod's version 1" made on the backup silently cloned the backup's own
version 1 of the same name, and a push between them was refused as "the same
database". Two unnamed memory lakes (both ``memory://``) could be merged
into each other.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import new_bucket

import merkle
from merkle.errors import UsageError

_SERVER = """
import logging, sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.WARNING)
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
sys.stdin.read()  # until the test closes our stdin
server.stop()
"""


@pytest.fixture
def second_endpoint(tmp_path: Path) -> Iterator[str]:
    """Another moto server, in a process of its own (servers in one process share
    their buckets); stopped at the end of the test."""
    script = tmp_path / "server.py"
    script.write_text(_SERVER)
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _lake(endpoint: str, bucket: str) -> merkle.Connection:
    return merkle.connect(f"s3://{bucket}/prod", endpoint_url=endpoint, region_name="us-east-1")


@pytest.mark.s3
def test_one_bucket_name_on_two_endpoints_is_two_lakes(
    moto_endpoint: str, second_endpoint: str
) -> None:
    bucket = new_bucket(moto_endpoint)
    import boto3

    boto3.client("s3", endpoint_url=second_endpoint, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    with _lake(moto_endpoint, bucket) as prod, _lake(second_endpoint, bucket) as backup:
        assert prod.uri == backup.uri
        assert not prod.same_lake(backup)
        shipped = prod.create_db("shop").create_table("t", key="id")
        shipped = shipped.write("t", [{"id": 1, "v": "prod"}]).commit()
        own = backup.create_db("shop").create_table("t", key="id")
        own.write("t", [{"id": 1, "v": "backup's own"}]).commit()
        with pytest.raises(UsageError, match="same lake"):
            backup.create_db("copy", root=shipped)
        assert "copy" not in backup.list_dbs()
        # A push to the other server is a push, not "the same database".
        merkle.sync(prod, backup, "shop", as_name="from-prod")
        assert backup.open_db("from-prod").get_records("t", [1]) == {1: {"id": 1, "v": "prod"}}


def test_two_unnamed_memory_lakes_are_two_lakes() -> None:
    with merkle.connect("memory://") as first, merkle.connect("memory://") as second:
        assert first.uri == second.uri
        assert not first.same_lake(second)
        assert first.same_lake(first)
        source = first.create_db("s").create_table("t", key="id").write("t", [{"id": 1}]).commit()
        second.create_db("s")
        with pytest.raises(UsageError, match="must be a database of"):
            second.merge(source, "s")
        with pytest.raises(UsageError, match="same lake"):
            second.create_db("copy", root=source)
