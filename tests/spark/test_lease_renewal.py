"""A bulk job's commit checks its writer lease as last renewed, not as granted.

The driver's lease is renewed by the worker-side renewer while the job runs;
the commit at its end must see that renewal, or a job longer than the lease
TTL (less the skew margin) fails after all its tablets were written (the
same defect the 30M-row load hit in ``Database.commit``).
"""

from __future__ import annotations

from pathlib import Path

import merkle
from merkle.refs import WriterTicket
from merkle.spark.lake import hold_lease, renewed_lease
from merkle.spark.options import LakeRef


def test_a_ticket_sees_the_renewal_of_a_held_lease(tmp_path: Path) -> None:
    conn = merkle.connect(tmp_path)
    lease = conn.leases.acquire_writer(60.0)
    ticket = WriterTicket(lease, lease.gc_generation, renewed=lambda: renewed_lease(lease))
    assert ticket.current() == lease  # nothing renews it yet
    with hold_lease(LakeRef(tmp_path.as_uri()), lease, 600.0):  # renewed on entry
        current = ticket.current()
        assert current.id == lease.id
        assert current.expires > lease.expires + 500
    assert renewed_lease(lease) == lease  # released by the renewer: as given again
    conn.leases.release(lease)
    conn.close()
