"""``merkle gc --spark MASTER``: the command runs ``merkle.spark.gc`` on a Spark of its own.

The command runs as a user runs it: a process of its own, which starts Spark
on ``local[2]`` and stops it. Two copies of one lake (files, or S3 over
moto's HTTP server) get the same history;
``merkle.gc`` collects one, the command the other, and the two must free
the same blocks. A master Spark cannot use is one line on stderr and exit
status 1, with Spark's own start-up output kept out of it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from aging import settle
from cli.helpers import SCRIPT, assert_one_error_line, process_env
from conftest import Lake, make_lake

import merkle
from merkle.blocks.codec import decode_node
from merkle.cli.gc import _reason

from .helpers import block_names, copy_lake, gc_history

pytestmark = pytest.mark.slow


def _merkle(lake: Lake, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``merkle`` in a process of its own on ``lake`` (its store options as ``--option``),
    with ``env`` added to its environment."""
    options = [f"--option={name}={value}" for name, value in lake.options.items()]
    return subprocess.run(
        [str(SCRIPT), *options, *args],
        env={**process_env(lake.uri), **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.parametrize("kind", ["file", pytest.param("s3", marks=pytest.mark.s3)])
def test_gc_spark_frees_what_merkle_gc_frees(
    tmp_path: Path, request: pytest.FixtureRequest, lake_conn: Any, kind: str
) -> None:
    """On S3 the store options reach the Spark tasks through ``--option``."""
    lakes = [make_lake(kind, tmp_path / "a", request), make_lake(kind, tmp_path / "b", request)]
    conn = lake_conn(lakes[0])
    gc_history(conn)
    conn.close()
    copy_lake(lakes[0], lakes[1])
    for lake in lakes:  # S3's whole-second timestamps: a block of this second is new
        settle(lake_conn(lake))
    here = merkle.gc(lake_conn(lakes[0]), keep_versions=2, grace="0s")

    args = ("gc", "--spark", "local[2]", "--keep-versions", "2", "--grace", "0s")
    done = _merkle(lakes[1], *args, "--format", "json")

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # Spark's start-up notices are kept out of the output
    record = json.loads(done.stdout)
    assert record["blocks_freed"] == here.blocks_freed > 0
    assert record["blocks_kept"] == here.blocks_kept
    assert {"seconds_mark", "seconds_list", "seconds_sweep"} <= set(record)
    there = lake_conn(lakes[1])
    saved = decode_node(there.store.get(record["report"]))
    assert sorted(saved["freed"]) == sorted(str(cid) for cid in here.freed)
    assert any("Spark tasks" in note for note in saved["notes"])
    assert block_names(there) == block_names(lake_conn(lakes[0]))
    assert merkle.verify(there).ok


def test_a_master_spark_cannot_use_is_one_line(
    tmp_path: Path, request: pytest.FixtureRequest, lake_conn: Any
) -> None:
    lake = make_lake("file", tmp_path / "lake", request)
    gc_history(lake_conn(lake))
    before = block_names(lake_conn(lake))

    done = _merkle(lake, "gc", "--spark", "nowhere://at-all", "--grace", "0s")

    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert_one_error_line(done.stderr)
    assert "could not start Spark on 'nowhere://at-all'" in done.stderr
    assert "Master must" in done.stderr  # Spark's own reason, from the JVM's output
    assert block_names(lake_conn(lake)) == before


def test_no_java_is_one_line(
    tmp_path: Path, request: pytest.FixtureRequest, lake_conn: Any
) -> None:
    """A JAVA_HOME that holds no Java: the line says what Spark's launcher said."""
    lake = make_lake("file", tmp_path / "lake", request)
    gc_history(lake_conn(lake))
    done = _merkle(lake, "gc", "--spark", "local[2]", JAVA_HOME=str(tmp_path / "no-java"))
    assert done.returncode == 1, done.stderr
    assert_one_error_line(done.stderr)
    assert "could not start Spark on 'local[2]'" in done.stderr
    assert "no-java/bin/java" in done.stderr
    assert "Java 17 or newer" in done.stderr


def test_a_merkle_error_in_a_task_is_the_line_reported() -> None:
    """What py4j reports for a job whose task raised (shortened from a real one)."""
    report = (
        "An error occurred while calling o51.collect.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in "
        "stage 0.0 failed 1 times: org.apache.spark.api.python.PythonException: "
        "Traceback (most recent call last):\n"
        '  File "/lib/merkle/gc/mark.py", line 80, in walk\n'
        "merkle.errors.MissingBlockError: block bafyx is missing from file:///lake\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handle(x.scala:1)\n"
    )
    assert _reason(report) == "block bafyx is missing from file:///lake"
    java = ": org.apache.spark.SparkException: Could not parse Master URL: 'x'\n\tat o.a.s.S(S:1)"
    assert _reason(java) == "Could not parse Master URL: 'x'"
