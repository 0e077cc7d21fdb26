"""What a garbage collection or a verification found, kept in the lake and returned.

Reports are plain dataclasses with a readable ``summary()``; a GC report is
also stored as a DAG-CBOR node under ``gc/reports/`` so an operator can see
what earlier runs freed (``load_reports``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from merkle.blocks.codec import NODE_VERSION, decode_object, encode_node
from merkle.errors import IntegrityError, NotFoundError
from merkle.storage.base import ObjectStore

__all__ = [
    "REPORT_PREFIX",
    "DatabaseReport",
    "GCReport",
    "VerifyReport",
    "load_reports",
]

REPORT_PREFIX = "gc/reports/"
REPORT_TYPE = "merkle/gc-report"
#: Reports beyond this many are deleted by the next run.
KEEP_REPORTS = 50
#: A stored report lists at most this many freed CIDs (the count is always exact).
STORED_CIDS = 100_000


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


@dataclass
class DatabaseReport:
    """What retention did to one database's journal."""

    head: int | None
    dropped: bool
    versions_kept: int
    versions_trimmed: int
    oldest_kept: int | None
    blocks_reached: int  # blocks first marked from this database's kept versions


@dataclass
class GCReport:
    """The outcome of one ``merkle.gc`` run (``dry_run``: what it would have done)."""

    dry_run: bool
    started_at: datetime
    finished_at: datetime | None = None
    retention: str = ""
    grace_seconds: float = 0.0
    cutoff: float = 0.0  # unreachable blocks older than this (epoch seconds) were freed
    blocks_listed: int = 0
    bytes_listed: int = 0
    blocks_kept: int = 0
    bytes_kept: int = 0
    blocks_freed: int = 0
    bytes_freed: int = 0
    blocks_spared_recent: int = 0  # unreachable, but too new to delete
    bytes_spared_recent: int = 0
    nodes_read: int = 0
    reader_leases: int = 0  # live reader leases marked
    #: Live reader leases of versions already trimmed and freed (skipped, not damage).
    reader_leases_stale: list[str] = field(default_factory=list)
    writer_leases_waited: int = 0
    writer_leases_passed: list[str] = field(default_factory=list)  # gone on without them
    fences: int = 0  # fence entries appended so passed writers cannot commit on old views
    blocks_rechecked_spared: int = 0  # candidates found missing or refreshed just before delete
    temporaries_removed: int = 0  # crash leftovers (temp files) older than the grace period
    temporary_bytes_removed: int = 0
    notes: list[str] = field(default_factory=list)  # harmless oddities (e.g. a HEAD hint ahead)
    sweep_skipped: str | None = None  # why nothing was deleted, when writers outlived the wait
    databases: dict[str, DatabaseReport] = field(default_factory=dict)
    tags: list[dict[str, Any]] = field(default_factory=list)  # versions kept by tags
    phases: dict[str, float] = field(default_factory=dict)
    freed: list[str] = field(default_factory=list)
    report_key: str | None = None

    def summary(self) -> str:
        """A few readable lines for people (the CLI prints this)."""
        verb = "would free" if self.dry_run else "freed"
        if self.sweep_skipped:
            verb = f"sweep skipped ({self.sweep_skipped}), freed"
        lines = [
            f"{'dry run: ' if self.dry_run else ''}{verb} {self.blocks_freed:,} blocks "
            f"({_size(self.bytes_freed)}); kept {self.blocks_kept:,} blocks "
            f"({_size(self.bytes_kept)}); {self.blocks_spared_recent:,} unreachable blocks "
            f"younger than the grace period ({_size(self.bytes_spared_recent)}) kept for now",
            f"retention: {self.retention}; grace {self.grace_seconds:g}s",
        ]
        for name, db in sorted(self.databases.items()):
            state = "dropped" if db.dropped else f"head v{db.head}"
            lines.append(
                f"  {name}: {state}, {db.versions_kept} versions kept, "
                f"{db.versions_trimmed} {'to trim' if self.dry_run else 'trimmed'}"
            )
        if self.tags:
            kept = ", ".join(f"{t['db']} v{t['version']} ({t['tag']})" for t in self.tags)
            lines.append(f"  kept by tags: {kept}")
        if self.reader_leases_stale:
            stale = self.reader_leases_stale
            lines.append(
                f"skipped {len(stale)} stale reader lease(s) of versions already trimmed and "
                "freed by an earlier collection (their readers back off; not damage): "
                + ", ".join(stale[:5])
                + (" ..." if len(stale) > 5 else "")
            )
        if self.writer_leases_passed:
            lines.append(
                f"went on without {len(self.writer_leases_passed)} writer lease(s) that did "
                f"not end in time (fenced {self.fences} journal(s) so they cannot commit on "
                "what was swept)"
            )
        if self.temporaries_removed:
            lines.append(
                f"removed {self.temporaries_removed:,} leftover temporary file(s) "
                f"({_size(self.temporary_bytes_removed)})"
            )
        lines.extend(f"note: {note}" for note in self.notes)
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in self.phases.items())
        lines.append(f"time: {phases}")
        return "\n".join(lines)

    def to_node(self) -> dict[str, Any]:
        data = asdict(self)
        data["started_at"] = self.started_at.isoformat()
        data["finished_at"] = self.finished_at.isoformat() if self.finished_at else None
        data["freed"] = self.freed[:STORED_CIDS]
        data["freed_truncated"] = len(self.freed) > STORED_CIDS
        data.pop("report_key")
        return {"type": REPORT_TYPE, "v": NODE_VERSION, **data}

    def save(self, store: ObjectStore) -> str:
        """Store this report under ``gc/reports/`` and prune old ones; the key."""
        stamp = self.started_at.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        key = f"{REPORT_PREFIX}{stamp}{'-dry-run' if self.dry_run else ''}"
        store.put(key, encode_node(self.to_node()))
        old = [info.key for info in store.list(REPORT_PREFIX)]
        store.delete_many(old[:-KEEP_REPORTS])
        self.report_key = key
        return key


def load_reports(store: ObjectStore) -> list[dict[str, Any]]:
    """The stored GC reports, oldest first, as decoded maps.

    A damaged one is an :class:`IntegrityError` naming its key: a report is a
    record only (nothing decides anything on it), so deleting it is the way out.
    One that a concurrent collection pruned after the listing is left out, as if
    listed a moment later.
    """
    reports = []
    for info in store.list(REPORT_PREFIX):
        try:
            data = store.get(info.key)
        except NotFoundError:  # pruned by a collection saving its report meanwhile
            continue
        reports.append(_decode_report(data, info.key))
    return reports


def _decode_report(data: bytes, key: str) -> dict[str, Any]:
    def damaged(problem: str) -> IntegrityError:
        return IntegrityError(
            f"GC report object {key!r} is damaged: {problem}; a report is only a record of "
            "an earlier collection (nothing reads it to decide anything): delete the object, "
            "or restore it from a backup"
        )

    return decode_object(data, REPORT_TYPE, damaged)


@dataclass
class VerifyReport:
    """The outcome of ``merkle.verify``: what was checked and what is damaged."""

    blocks_checked: int = 0
    bytes_checked: int = 0
    versions_checked: int = 0
    missing: list[tuple[str, str]] = field(default_factory=list)  # (cid, where)
    corrupt: list[tuple[str, str]] = field(default_factory=list)
    journals_damaged: list[tuple[str, str]] = field(default_factory=list)  # (db, problem)
    notes: list[str] = field(default_factory=list)
    unreachable_blocks: int | None = None  # None when only one database was checked
    unreachable_bytes: int | None = None
    #: Blocks gone because a collection trimmed their version while verify walked it.
    trimmed_meanwhile: int = 0

    @property
    def ok(self) -> bool:
        """True when no journal is damaged and no reachable block is missing or corrupt."""
        return not self.missing and not self.corrupt and not self.journals_damaged

    def summary(self) -> str:
        lines = [
            f"checked {self.blocks_checked:,} blocks ({_size(self.bytes_checked)}) reachable "
            f"from {self.versions_checked:,} versions: "
            + (
                "no damage"
                if self.ok
                else f"{len(self.missing)} missing, {len(self.corrupt)} corrupt, "
                f"{len(self.journals_damaged)} journal problem(s)"
            )
        ]
        for db, problem in self.journals_damaged[:20]:
            lines.append(f"  journal of {db!r} damaged: {problem}")
        lines.extend(f"  note: {note}" for note in self.notes[:20])
        for cid, where in self.missing[:20]:
            lines.append(f"  missing {cid} (from {where})")
        for cid, where in self.corrupt[:20]:
            lines.append(f"  corrupt {cid} (from {where})")
        if self.trimmed_meanwhile:
            lines.append(
                f"  note: {self.trimmed_meanwhile:,} blocks were freed by a collection that "
                "trimmed their version while this check ran (not damage)"
            )
        if self.unreachable_blocks is not None:
            lines.append(
                f"unreachable: {self.unreachable_blocks:,} blocks "
                f"({_size(self.unreachable_bytes or 0)}): `merkle gc` frees them"
            )
        return "\n".join(lines)
