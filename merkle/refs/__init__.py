"""The ref manager: version journals with compare-and-set, leases and the GC lock.

This is the lake's consensus layer, built on ``ObjectStore.put_if_absent``
alone: :class:`RefManager` commits and reads database versions,
:class:`LeaseManager` grants reader and writer leases and the GC lock.
See ``doc/refs.md`` for the formats and protocols.
"""

from typing import TYPE_CHECKING

from merkle.lazy import lazy_attributes
from merkle.refs.entry import JournalEntry
from merkle.refs.errors import (
    JournalConflictError,
    JournalEntryDamagedError,
    JournalGapError,
    JournalIndeterminateError,
    LeaseExpiredError,
    LockHeldError,
)
from merkle.refs.journal import RefManager
from merkle.refs.names import check_db_name, check_tag_name

if TYPE_CHECKING:
    from merkle.refs.audit import JournalAudit, JournalDamagedError, audit_journal
    from merkle.refs.gclock import GCLock, LockState, WritersBusyError
    from merkle.refs.leases import DEFAULT_SKEW_MARGIN, DEFAULT_WRITER_WAIT, Lease, LeaseManager
    from merkle.refs.tags import Tag, TagManager
    from merkle.refs.writer import WriterSession, WriterTicket, settle_passed_commit

# Imported when first used: auditing and tags, and leases, the GC lock and the
# writer session (a process that only reads takes no lease).
__getattr__ = lazy_attributes(
    __name__,
    {
        "JournalAudit": "merkle.refs.audit",
        "JournalDamagedError": "merkle.refs.audit",
        "audit_journal": "merkle.refs.audit",
        "GCLock": "merkle.refs.gclock",
        "LockState": "merkle.refs.gclock",
        "WritersBusyError": "merkle.refs.gclock",
        "DEFAULT_SKEW_MARGIN": "merkle.refs.leases",
        "DEFAULT_WRITER_WAIT": "merkle.refs.leases",
        "Lease": "merkle.refs.leases",
        "LeaseManager": "merkle.refs.leases",
        "Tag": "merkle.refs.tags",
        "TagManager": "merkle.refs.tags",
        "WriterSession": "merkle.refs.writer",
        "WriterTicket": "merkle.refs.writer",
        "settle_passed_commit": "merkle.refs.writer",
    },
)

__all__ = [
    "DEFAULT_SKEW_MARGIN",
    "DEFAULT_WRITER_WAIT",
    "GCLock",
    "JournalAudit",
    "JournalConflictError",
    "JournalDamagedError",
    "JournalEntry",
    "JournalEntryDamagedError",
    "JournalGapError",
    "JournalIndeterminateError",
    "Lease",
    "LeaseExpiredError",
    "LeaseManager",
    "LockHeldError",
    "LockState",
    "RefManager",
    "Tag",
    "TagManager",
    "WriterSession",
    "WriterTicket",
    "WritersBusyError",
    "audit_journal",
    "check_db_name",
    "check_tag_name",
    "settle_passed_commit",
]
