"""Storage errors found by an adversarial probe: a full disk under a file store, and S3
client options that boto3 refuses, each a merkle error that names the thing and what to do."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

import merkle
from merkle.cli.main import cli
from merkle.errors import StorageError, UsageError
from merkle.storage import open_store
from merkle.storage.file import FileStore

from .test_file_store import hidden_files


def _failing_writes(
    monkeypatch: pytest.MonkeyPatch, fails: Callable[[str], bool], code: int = errno.ENOSPC
) -> None:
    """Make the file store's temp-file writes beside the paths ``fails`` picks fail with
    ``code``, as ``os.write`` would; the others are written as usual."""
    write_temp = FileStore._write_temp

    def fake(self: FileStore, path: str, data: bytes, *, sync: bool = True) -> str:
        if fails(path):
            raise OSError(code, os.strerror(code))
        return write_temp(self, path, data, sync=sync)

    monkeypatch.setattr(FileStore, "_write_temp", fake)


def test_put_many_onto_a_full_disk_names_the_key_and_says_the_disk_is_full(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_writes(monkeypatch, lambda path: path.endswith(os.path.join("b", "2")))
    items = [("a/1", b"one"), ("b/2", b"two"), ("c/3", b"three")]
    with pytest.raises(StorageError) as caught:
        file_store.put_many(items)
    message = str(caught.value)
    assert "'b/2'" in message
    assert f"the disk holding {file_store.root} is full" in message
    assert "free some space" in message
    assert "gc" in message
    assert caught.value.definite
    assert not [key for key, _ in items if file_store.exists(key)]
    assert hidden_files(file_store.root) == []


def test_put_many_names_the_first_key_that_failed_and_counts_the_others(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_writes(monkeypatch, lambda path: not path.endswith("a"), errno.EACCES)
    with pytest.raises(StorageError) as caught:
        file_store.put_many([("a", b"1"), ("b", b"2"), ("c", b"3")])
    message = str(caught.value)
    assert "cannot write 'b' to" in message
    assert "1 more of the 3 objects failed" in message
    assert "full" not in message


def test_put_if_absent_onto_a_full_disk_names_the_key(
    file_store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_writes(monkeypatch, lambda path: True)
    with pytest.raises(StorageError, match=r"cannot write 'refs/x' to .* is full"):
        file_store.put_if_absent("refs/x", b"data")
    assert not file_store.exists("refs/x")


def test_a_commit_onto_a_full_disk_names_an_object_it_could_not_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with merkle.connect(str(tmp_path / "lake")) as conn:
        db = conn.create_db("shop").create_table("t", key="k").commit()
        _failing_writes(monkeypatch, lambda path: True)
        with pytest.raises(StorageError) as caught:
            db.write("t", [{"k": 1, "v": 1}]).commit()
        message = str(caught.value)
        assert message.startswith("cannot write '")
        assert "is full" in message
        monkeypatch.undo()
        assert conn.open_db("shop").version == db.version


# -- S3 client options ------------------------------------------------------------------

NOWHERE = "http://127.0.0.1:9"  # never contacted: the client is made before any request


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"aws_access_key_id": "AKIAEXAMPLE"}, "aws_secret_access_key"),
        ({"aws_secret_access_key": "secret"}, "aws_access_key_id"),
        ({"region_name": "not a region!"}, "region_name 'not a region!'"),
    ],
)
def test_s3_options_boto3_refuses_are_usage_errors_naming_the_option(
    options: dict[str, str], named: str
) -> None:
    with pytest.raises(UsageError, match=named) as caught:
        open_store("s3://bucket/lake", endpoint_url=NOWHERE, max_attempts=1, **options)
    assert "botocore" not in type(caught.value).__module__


def test_the_cli_reports_a_malformed_region_without_a_traceback() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "--lake",
            "s3://bucket/lake",
            "-o",
            f"endpoint_url={NOWHERE}",
            "-o",
            "region_name=not a region!",
            "db",
            "list",
        ],
        env={"MERKLE_LAKE": None, "MERKLE_AUTHOR": None},
        prog_name="merkle",
    )
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not an escaped exception
    assert result.stderr.startswith("error: S3 option region_name")
