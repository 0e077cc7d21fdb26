"""``merkle gc`` and ``merkle verify``: garbage collection and integrity checks.

Both are thin layers over :func:`merkle.gc` and :func:`merkle.verify` (``gc
--spark MASTER``: over :func:`merkle.spark.gc`, on a Spark session the
command starts and stops). On a terminal they show a progress bar on stderr
and print a readable summary; with ``--format json|jsonl|csv`` they print
the report's numbers instead.
What a collection waits for (a writer lease, another collector's lock) is
said on stderr as it happens. ``verify`` exits with status 1 when it finds a
missing or corrupt block or a damaged journal.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from typing import IO, Any

import click

import merkle
from merkle.cli.common import CliError, CliState, connection, say
from merkle.cli.output import default_format, emit_record, format_option
from merkle.gc import GCReport, VerifyReport

__all__ = ["gc", "verify"]


class _Progress:
    """A click progress bar per phase, on stderr, only when stderr is a terminal."""

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.enabled = sys.stderr.isatty()
        self.phase: str | None = None
        self.bar: Any = None
        self.done = 0

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if not self.enabled or total is None:
            return
        if phase != self.phase:
            self.phase, self.done = phase, 0
            self.bar = self.stack.enter_context(
                click.progressbar(length=total, label=f"{phase:>6}", file=sys.stderr)
            )
        self.bar.update(done - self.done)
        self.done = done


def _tell(message: str) -> None:
    """A notice of what the collection waits for, on stderr (never mixed with the report)."""
    click.echo(f"merkle gc: {message}", err=True)


def _emit(summary: str, record: dict[str, Any], fmt: str | None) -> None:
    """The readable summary as a table (a terminal's default), else the report's numbers."""
    if (fmt or default_format()) == "table":
        say(summary)
    else:
        emit_record(record, fmt)


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--keep-within`` / ``--grace`` duration, checked at once by the one parser
    the library uses (:func:`merkle.gc.policy.parse_duration`: units, their case, a
    unit given twice), so a typo fails before a collection or a Spark session starts;
    its UsageError is the command's one-line error."""
    if value is not None:
        from merkle.gc.policy import parse_duration

        parse_duration(value, param.name or "a duration")
    return value


def _gc_record(report: GCReport) -> dict[str, Any]:
    record: dict[str, Any] = {
        "dry_run": report.dry_run,
        "blocks_freed": report.blocks_freed,
        "bytes_freed": report.bytes_freed,
        "blocks_kept": report.blocks_kept,
        "bytes_kept": report.bytes_kept,
        "blocks_spared_recent": report.blocks_spared_recent,
        "bytes_spared_recent": report.bytes_spared_recent,
        "retention": report.retention,
        "grace_seconds": report.grace_seconds,
        "writer_leases_passed": len(report.writer_leases_passed),
        "fences": report.fences,
        "temporaries_removed": report.temporaries_removed,
        "sweep_skipped": report.sweep_skipped,
        "notes": "; ".join(report.notes) or None,
        "report": report.report_key,
    }
    for phase, seconds in report.phases.items():
        record[f"seconds_{phase}"] = round(seconds, 6)
    return record


@click.command(short_help="Delete blocks no kept version needs.")
@click.option("--dry-run", is_flag=True, help="Report what would be freed; delete nothing.")
@click.option(
    "--keep-versions",
    type=int,
    default=None,
    metavar="N",
    help="Keep the newest N versions of each database (this run's default).",
)
@click.option(
    "--keep-within",
    default=None,
    metavar="DURATION",
    callback=_duration,
    help="Keep versions committed within DURATION (e.g. 7d, 12h, 1h30m).",
)
@click.option(
    "--grace",
    default=None,
    metavar="DURATION",
    callback=_duration,
    help="Spare unreachable blocks younger than DURATION (default: the lake's, 1h).",
)
@click.option(
    "--break-lock",
    is_flag=True,
    help="Take the GC lock from a collector that is surely gone (killed), then collect.",
)
@click.option(
    "--spark",
    "spark_master",
    default=None,
    metavar="MASTER",
    help="Mark, list and delete in Spark tasks on MASTER (local[*], spark://host:7077, ...).",
)
@format_option
def gc(
    dry_run: bool,
    keep_versions: int | None,
    keep_within: str | None,
    grace: str | None,
    break_lock: bool,
    spark_master: str | None,
    fmt: str | None,
) -> None:
    """Mark everything that kept versions and leases reach; delete the rest.

    Retention options replace the lake's default for this run (per-database
    overrides still apply); without them the lake's stored policy decides
    (by default every version is kept). The report is also saved in the lake
    under gc/reports/. --break-lock ends the lock of a collector that was
    killed (instead of waiting for it to expire); the broken collector stops
    before its next delete. --spark runs the same collection with its marking,
    listing and deleting spread over Spark tasks (needs pyspark and Java 17+).
    See doc/operations.md and doc/spark.md.
    """
    if break_lock and dry_run:
        # A dry run takes no lock (it runs with read-only credentials): breaking a live
        # collector's lock for it would stop that collector and delete nothing.
        raise click.UsageError(
            "--break-lock takes the GC lock for a collection that deletes; a dry run takes "
            "no lock: drop --break-lock (or --dry-run)"
        )
    conn = connection()
    if break_lock:
        broken = conn.leases.break_gc_lock()
        if broken is None:
            _tell("the GC lock was not held; nothing to break")
        else:
            _tell(f"broke the GC lock of {broken.holder} (generation {broken.generation})")
    with ExitStack() as stack:
        settings: dict[str, Any] = {
            "dry_run": dry_run,
            "keep_versions": keep_versions,
            "keep_within": keep_within,
            "grace": grace,
            "progress": _Progress(stack),
            "notify": _tell,
        }
        if spark_master is None:
            report = merkle.gc(conn, **settings)
        else:
            report = _spark_gc(spark_master, settings)
    if report.sweep_skipped and (fmt or default_format()) != "table":
        _tell(f"sweep skipped: {report.sweep_skipped}")  # the summary says it on a terminal
    _emit(report.summary(), _gc_record(report), fmt)


def _spark_gc(master: str, settings: dict[str, Any]) -> GCReport:
    """:func:`merkle.spark.gc` of the command's lake, on a session started (and stopped)
    here; what Spark itself raises becomes one line."""
    try:
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
        from pyspark.errors import PySparkException

        import merkle.spark
    except ImportError:
        raise CliError(
            "merkle gc --spark needs pyspark: pip install 'merkle-db[spark]' "
            "(Spark also needs Java 17 or newer)"
        ) from None
    state = click.get_current_context().find_root().find_object(CliState)
    assert state is not None  # connection() checked that there is a lake
    assert state.lake
    with _jvm_output_aside() as aside:
        try:
            session = merkle.spark.session(master, "merkle gc")
        except Exception as exc:  # no Java, a master that cannot be parsed or reached, ...
            # When the JVM exits at once, only what it printed says why.
            aside.seek(0)
            printed = aside.read().decode(errors="replace")
            reason = _reason(printed if "JAVA_GATEWAY_EXITED" in str(exc) else str(exc))
            raise CliError(
                f"could not start Spark on {master!r}: {reason or type(exc).__name__} (it needs "
                "Java 17 or newer and a master such as local[4] or spark://host:7077; "
                "see doc/spark.md)"
            ) from None
    try:
        return merkle.spark.gc(session, state.lake, **settings, **state.options)
    except (PySparkException, Py4JError) as exc:
        raise CliError(
            f"the collection's Spark job failed: {_reason(str(exc)) or type(exc).__name__}"
        ) from None
    finally:
        session.stop()


@contextlib.contextmanager
def _jvm_output_aside() -> Iterator[IO[bytes]]:
    """This process's stdout and stderr pointed at a temporary file while Spark starts:
    the JVM it launches inherits them and would print its start-up notices (and
    later log lines) among the command's output and its one-line errors."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as aside:
        os.dup2(aside.fileno(), 1)
        os.dup2(aside.fileno(), 2)
        try:
            yield aside
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


def _reason(text: str) -> str:
    """The line of Spark's report that says what went wrong, for a one-line error: a
    merkle-db error raised in a task, else the first line naming an exception (its
    message), else the first line that is not a stack frame or a JVM warning."""
    # py4j starts the Java exception's line with ": "
    lines = [line.strip().removeprefix(": ") for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("merkle.errors.") and ": " in line:
            return line.split(": ", 1)[1][:300]
    for line in lines:
        head, sep, message = line.partition(": ")
        if sep and message and head.endswith(("Exception", "Error")):
            return message[:300]
    plain = [line for line in lines if not line.startswith(("at ", "...", "WARNING:"))]
    return plain[0][:300] if plain else ""


def _verify_record(report: VerifyReport) -> dict[str, Any]:
    return {
        "ok": report.ok,
        "versions_checked": report.versions_checked,
        "blocks_checked": report.blocks_checked,
        "bytes_checked": report.bytes_checked,
        "missing": [cid for cid, _ in report.missing],
        "corrupt": [cid for cid, _ in report.corrupt],
        "journals_damaged": [f"{db}: {problem}" for db, problem in report.journals_damaged],
        "notes": report.notes,
        "unreachable_blocks": report.unreachable_blocks,
        "unreachable_bytes": report.unreachable_bytes,
    }


@click.command(short_help="Re-hash every block kept versions reach.")
@click.argument("db", required=False)
@format_option
def verify(db: str | None, fmt: str | None) -> None:
    """Read and re-hash every block reachable from kept versions (of DB, or of all).

    Exits with status 1 if a block is missing or corrupt or a journal is
    damaged, naming the damage.
    """
    conn = connection()
    with ExitStack() as stack:
        report = merkle.verify(conn, db, progress=_Progress(stack))
    _emit(report.summary(), _verify_record(report), fmt)
    if report.journals_damaged:
        name, problem = report.journals_damaged[0]
        raise CliError(
            f"damage found: the journal of {name!r} is damaged ({problem}); "
            f"{len(report.journals_damaged)} journal problem(s), {len(report.missing)} "
            f"missing and {len(report.corrupt)} corrupt blocks; restore them from a copy "
            "of the lake"
        )
    if not report.ok:
        first = (report.missing or report.corrupt)[0]
        raise CliError(
            f"damage found: {len(report.missing)} missing and {len(report.corrupt)} corrupt "
            f"blocks (first: {first[0]} from {first[1]}); restore them from a copy of the lake"
        )
