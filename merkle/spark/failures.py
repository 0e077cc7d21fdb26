"""merkle-db errors raised inside Spark tasks, raised again on the driver as themselves.

A task that raises (a null key, a conflict found while writing) fails the
job, and pyspark reports it as a ``PythonException`` or a py4j error whose
text holds the worker's whole traceback: the merkle-db error is its last
``merkle.errors.<Type>: message`` line. The driver-side functions of this
package turn such a report back into that error, so callers catch
``merkle.errors`` types and read one message, as they do without Spark.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from merkle import errors

__all__ = ["raised_as_merkle_errors", "task_error"]

_LINE = re.compile(r"merkle\.errors\.([A-Za-z]+): (.+)")


def task_error(exc: BaseException) -> errors.MerkleError | None:
    """The merkle-db error a Spark task raised, read from the report ``exc`` carries
    (the last one named there), or None when it names none."""
    found = None
    for line in str(exc).splitlines():
        match = _LINE.search(line)
        if match is not None:
            found = match
    if found is None:
        return None
    kind = getattr(errors, found.group(1), None)
    message = found.group(2).strip()
    if isinstance(kind, type) and issubclass(kind, errors.MerkleError):
        try:
            return kind(message)
        except TypeError:  # an error type that takes more than its message
            pass
    return errors.MerkleError(message)


@contextlib.contextmanager
def raised_as_merkle_errors() -> Iterator[None]:
    """Run a Spark job; a task's merkle-db error is raised as itself, not as Spark's report."""
    try:
        yield
    except errors.MerkleError:
        raise
    except Exception as exc:
        error = task_error(exc)
        if error is None:
            raise
        raise error from None
