"""A merkle-db error raised in a Spark task is raised on the driver as itself."""

from __future__ import annotations

import pytest

from merkle import errors
from merkle.spark.failures import raised_as_merkle_errors, task_error

REPORT = """An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/x/merkle/spark/jobs.py", line 159, in encode_keys
    raise UsageError(...)
merkle.errors.SchemaError: key field 'id' holds a null in row 0: give every record a key
"""


def test_the_last_merkle_error_of_a_report_is_raised_as_itself() -> None:
    found = task_error(RuntimeError(REPORT))
    assert type(found) is errors.SchemaError
    assert str(found) == "key field 'id' holds a null in row 0: give every record a key"
    with pytest.raises(errors.SchemaError, match="holds a null"), raised_as_merkle_errors():
        raise RuntimeError(REPORT)


def test_other_failures_pass_unchanged() -> None:
    assert task_error(RuntimeError("java.lang.OutOfMemoryError: heap")) is None
    with pytest.raises(RuntimeError, match="heap"), raised_as_merkle_errors():
        raise RuntimeError("java.lang.OutOfMemoryError: heap")
    conflict = task_error(RuntimeError("merkle.errors.MergeConflictError: both sides"))
    assert type(conflict) is errors.MergeConflictError
    unknown = task_error(RuntimeError("merkle.errors.NoSuchError: what"))
    assert type(unknown) is errors.MerkleError
