"""Every single store fault at every call position of a small life of a lake.

The scenario (``scenario.py``: create, load, change, clone, change the clone,
revert, read an old version under a lease, gc with ``keep_versions=2`` and no
grace, verify, read the heads) is run once without faults to count its store
calls. Then, for every call position k and every fault kind that means
something at k (reads: refused; writes: refused, timed out, applied with the
reply lost; bulk writes also half applied), it runs again on a fresh lake
with that one fault, and a fresh connection checks:

* every acknowledged commit (``commit()`` returned) is readable, with its rows;
* no version in any journal reaches a missing or corrupt block;
* every exception the scenario saw is a ``merkle.errors`` type.

Memory and file stores run every position and kind (about 260 runs, 6 s
and 16 s on a fast machine). S3 (moto over HTTP, 2-9 s a run) is a sample of
what depends on the backend, a write that S3 applied but whose reply was
lost: every conditional put (the journal's compare-and-set), and the first
and every fourth call of each other write; slow. A failed read, or a fault
in ``make_durable`` or ``remove_stale_temporaries`` (which do nothing on
S3), never reaches the backend: the fault store raises it, so it is the
memory sweep's fault again, and the S3 plan leaves them out.

A fault is addressed as "the n-th call of this operation", not as the k-th
call of all: whether a writer refreshes (``touch``) a block it re-puts
depends on the clock (S3 reports modification times in whole seconds, so a
block written in the lease's first second may read as older than the lease),
and a touch more or less must not shift every later position. For the same
reason the S3 plan injects no fault into ``touch`` itself; the memory and
file sweeps, whose clocks are exact, do.
"""

from __future__ import annotations

import pickle
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import new_bucket

from merkle.storage import ObjectStore, open_store

from .faults import BULK_WRITES, READS, Fault, FaultKind, FaultyStore
from .scenario import check_lake, run_scenario

#: Calls the S3 plan leaves out: ``touch`` is made or not by the second-resolution
#: clock (see the module doc); the other two do nothing on S3, so a fault there is
#: the memory sweep's fault again.
S3_LEFT_OUT = frozenset({"touch", "make_durable", "remove_stale_temporaries"})
#: The S3 sweep applies every n-th call of a write (and its first) with the reply lost,
#: and every conditional put.
S3_WRITE_STRIDE = 4


def kinds_at(op: str) -> tuple[FaultKind, ...]:
    """The fault kinds that differ at a call of ``op`` (a failed read is a failed read)."""
    if op in READS:
        return ("refused",)
    if op in BULK_WRITES:
        return ("refused", "timeout", "applied", "partial")
    return ("refused", "timeout", "applied")


def run_once(inner: ObjectStore, faults: list[Fault]) -> tuple[FaultyStore, list[str]]:
    """One scenario on ``inner`` with ``faults``; the store and the problems found."""
    store = FaultyStore(inner, faults, threads={threading.get_ident()})
    outcome = run_scenario(store)
    problems = [f"{step}: non-merkle exception\n{trace}" for step, trace in outcome.foreign]
    if "connect" in outcome.completed:
        reopened = pickle.loads(pickle.dumps(inner))  # the same lake, a new store object
        problems += check_lake(reopened, outcome)
    return store, problems


def sweep(
    fresh: Callable[[str], ObjectStore],
    plan: Callable[[int, str], tuple[FaultKind, ...]] = lambda k, op: kinds_at(op),
) -> None:
    """The clean run, then one run per (position, kind) of ``plan``; fails listing broken runs."""
    store, problems = run_once(fresh("clean"), [])
    assert problems == []
    assert not store.fired
    clean_log = list(store.log)
    failures = []
    runs = 0
    per_op: Counter[str] = Counter()
    for k, (op, _subject) in enumerate(clean_log, start=1):
        per_op[op] += 1
        for kind in plan(k, op):
            runs += 1
            fault = Fault(kind, at=per_op[op], op=op)
            faulty, problems = run_once(fresh(f"k{k}-{kind}"), [fault])
            assert len(faulty.fired) == 1, f"fault {kind} at {op} call {per_op[op]} did not fire"
            if problems:
                hit = faulty.fired[0]
                failures.append(
                    f"{kind} at call {k} ({hit.op} {hit.subject}): " + "; ".join(problems)
                )
    assert runs > 0
    assert failures == [], f"{len(failures)} of {runs} runs broke:\n" + "\n".join(failures)


def test_every_single_fault_on_memory() -> None:
    sweep(lambda name: open_store(f"memory://sweep-{uuid.uuid4().hex}"))


def test_every_single_fault_on_files(tmp_path: Path) -> None:
    sweep(lambda name: open_store(tmp_path / name))


@pytest.mark.slow
@pytest.mark.s3
def test_single_faults_on_s3(moto_endpoint: str) -> None:
    bucket = new_bucket(moto_endpoint)
    options = {"endpoint_url": moto_endpoint, "region_name": "us-east-1", "max_attempts": 1}

    calls: Counter[str] = Counter()  # the plan is asked in call order

    def plan(k: int, op: str) -> tuple[FaultKind, ...]:
        if op in S3_LEFT_OUT or op in READS:
            return ()
        calls[op] += 1
        if op == "put_if_absent" or calls[op] == 1 or calls[op] % S3_WRITE_STRIDE == 0:
            return ("applied",)
        return ()

    sweep(lambda name: open_store(f"s3://{bucket}/{name}", **options), plan)
