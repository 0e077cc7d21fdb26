"""The crash test: writers and collectors SIGKILLed at random points, then the lake checked.

A *trial* starts writers and collectors (``crash_workers.py``) on a file
lake, kills a random one of them (SIGKILL) at random intervals and restarts
it, then kills them all at once (a machine losing power, as far as the
processes can tell), and checks the lake with a fresh connection whose clock
is an hour ahead (so every lease and lock of the dead has expired):

1. every acknowledged commit (a line in the writers' log) is still the entry
   at its version, with the same root, and reads in full (versions of the
   ``churn`` database may have been removed by its retention, never changed);
2. ``merkle.verify`` finds no missing or corrupt block in any version;
3. ``merkle.gc`` runs, and afterwards 1 and 2 still hold and no lease
   remains (every one has expired, so GC must have reaped it);
4. no process raised an exception that is not a ``merkle.errors`` type.

Temporary files left after the checker's GC are counted (a figure, and
``test_crash.py`` holds the promise that GC removes them).

``python -m reliability.crash --trials 200`` (from ``tests/``; ``make
crash``) runs a long series and prints the figures doc/reliability.md quotes.
Children are forked from a forkserver that has imported merkle, so a
restart costs milliseconds; it is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import merkle
from merkle.db.connection import Connection
from merkle.errors import MerkleError, NotFoundError
from merkle.gc import set_retention

from . import crash_workers
from .crash_workers import CHURN, CHURN_KEEP, GC_SETTINGS, connect_short

__all__ = ["Figures", "run_crash_trials"]

#: Bounds on the time between two kills, in seconds.
KILL_GAP = (0.05, 0.8)
#: The checker's clock is this far ahead: every lease and lock of the dead has expired.
CHECKER_AHEAD = 3600.0
JOIN = 30.0
#: A trial without an acknowledged commit goes on for up to this many times its length.
ACK_PATIENCE = 12


@dataclass
class Figures:
    """What a series of trials did and found."""

    trials: int = 0
    kills: int = 0
    acknowledged: int = 0  # commits the writers logged
    versions_checked: int = 0  # acknowledged versions read in full
    broken: int = 0  # problems found (should be 0)
    temps_left: int = 0  # .tmp-* files left after the checker's GC
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"trials {self.trials}, kills {self.kills}, acknowledged commits "
            f"{self.acknowledged}, versions checked {self.versions_checked}, broken "
            f"{self.broken}, temp files left after gc {self.temps_left}"
        )


@dataclass(frozen=True)
class Ack:
    db: str
    version: int
    root: str


def read_acks(path: Path) -> list[Ack]:
    """The acknowledged commits in a writers' log (a torn last line cannot happen: one write)."""
    if not path.exists():
        return []
    acks = []
    for line in path.read_text().splitlines():
        db, version, root = line.split()
        acks.append(Ack(db, int(version), root))
    return acks


def _read_all(conn: Connection, ack: Ack) -> None:
    db = conn.open_db(ack.db, version=ack.version)
    for name in db.list_tables():
        list(db.scan(name))


class _Lake:
    """One lake of a series: its directory, log, errors and what was checked already."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.uri = (directory / "lake").as_uri()
        self.acks = directory / "acks.log"
        self.errors = directory / "errors"
        self.errors.mkdir(parents=True)
        self.read: set[Ack] = set()
        with Connection(merkle.storage.open_store(self.uri)) as conn:
            set_retention(conn, keep_versions=CHURN_KEEP, db=CHURN)

    def check(self, figures: Figures) -> None:
        """Steps 1-4 of the module doc; problems go to ``figures``."""
        problems = figures.problems
        before = len(problems)
        acks = read_acks(self.acks)
        figures.acknowledged += len({ack for ack in acks if ack not in self.read})
        checker = connect_short(self.uri, clock=lambda: time.time() + CHECKER_AHEAD)
        try:
            self._check_versions(checker, acks, figures)
            try:
                merkle.gc(checker, **GC_SETTINGS)
            except MerkleError as exc:
                problems.append(f"the checker's gc failed: {type(exc).__name__}: {exc}")
            self._check_versions(checker, acks, figures)
            left = [info.key for info in checker.store.list("leases/")]
            if left:
                problems.append(f"{len(left)} expired leases survived gc: {left[:3]}")
        finally:
            checker.close()
        figures.temps_left += sum(
            name.startswith(".tmp-")
            for _, _, names in os.walk(self.directory / "lake")
            for name in names
        )
        for report in sorted(self.errors.iterdir()):
            problems.append(f"{report.name}: {report.read_text()[-2000:]}")
            report.unlink()
        figures.broken += len(problems) - before

    def _check_versions(self, conn: Connection, acks: list[Ack], figures: Figures) -> None:
        problems = figures.problems
        for ack in dict.fromkeys(acks):
            try:
                entry = conn.refs.get(ack.db, ack.version)
            except NotFoundError:
                if ack.db != CHURN:
                    problems.append(f"acknowledged {ack} is gone from the journal")
                continue
            except MerkleError as exc:
                problems.append(f"acknowledged {ack}: {type(exc).__name__}: {exc}")
                continue
            if entry.root != ack.root:
                problems.append(f"acknowledged {ack} was replaced by root {entry.root}")
            elif ack not in self.read:
                try:
                    _read_all(conn, ack)
                except MerkleError as exc:
                    problems.append(f"acknowledged {ack} cannot be read: {exc}")
                else:
                    self.read.add(ack)
                    figures.versions_checked += 1
        try:
            report = merkle.verify(conn)
        except MerkleError as exc:
            problems.append(f"verify failed: {type(exc).__name__}: {exc}")
        else:
            problems.extend(f"{where}: missing block {cid}" for cid, where in report.missing)
            problems.extend(f"{where}: corrupt block {cid}" for cid, where in report.corrupt)


@contextlib.contextmanager
def _forkserver() -> Iterator[Any]:
    """A forkserver context that has imported merkle and the workers; stopped on exit."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["merkle", crash_workers.__name__])
    try:
        yield ctx
    finally:
        multiprocessing.forkserver._forkserver._stop()  # type: ignore[attr-defined]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _kill(process: Any) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGKILL)
    process.join(JOIN)


def run_crash_trials(
    base: Path,
    *,
    trials: int,
    seconds: float,
    writers: int = 2,
    collectors: int = 1,
    per_lake: int = 10,
    seed: int = 0,
) -> Figures:
    """Run ``trials`` trials of ``seconds`` each, a fresh lake every ``per_lake`` trials."""
    rng = random.Random(seed)
    figures = Figures()
    roles = ["writer"] * writers + ["collector"] * collectors
    lake: _Lake | None = None
    with _forkserver() as ctx:

        def start(role: str) -> Any:
            if role == "writer":
                target: Any = crash_workers.writer
                args: tuple[Any, ...] = (lake.uri, str(lake.acks), str(lake.errors))
            else:
                target, args = crash_workers.collector, (lake.uri, str(lake.errors))
            process = ctx.Process(target=target, args=(*args, rng.randrange(2**32)), daemon=True)
            process.start()
            return process

        for trial in range(trials):
            if trial % per_lake == 0:
                lake = _Lake(base / f"lake-{trial // per_lake}")
            assert lake is not None
            running = [start(role) for role in roles]
            acked_before = _size(lake.acks)
            try:
                # A trial lasts ``seconds``, and longer (up to ACK_PATIENCE times) until a
                # writer has acknowledged a commit in it: on a loaded machine a writer
                # killed soon after it starts may not get one through in ``seconds``.
                started = time.monotonic()
                while time.monotonic() < started + seconds or (
                    _size(lake.acks) == acked_before
                    and time.monotonic() < started + seconds * ACK_PATIENCE
                ):
                    time.sleep(rng.uniform(*KILL_GAP))  # a random crash point, not a wait
                    slot = rng.randrange(len(running))
                    _kill(running[slot])
                    figures.kills += 1
                    running[slot] = start(roles[slot])
            finally:
                for process in running:
                    _kill(process)
            figures.kills += len(running)
            figures.trials += 1
            lake.check(figures)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of a trial")
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--collectors", type=int, default=2)
    parser.add_argument("--per-lake", type=int, default=10, help="trials on one lake")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", action="store_true", help="keep the lakes (printed)")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="merkle-crash-"))
    started = time.monotonic()
    figures = run_crash_trials(
        base,
        trials=args.trials,
        seconds=args.seconds,
        writers=args.writers,
        collectors=args.collectors,
        per_lake=args.per_lake,
        seed=args.seed,
    )
    for problem in figures.problems:
        print("BROKEN:", problem)
    print(
        f"crash test (seed {args.seed}, {args.writers} writers, {args.collectors} collectors, "
        f"{args.seconds:g} s trials, {time.monotonic() - started:.0f} s): {figures.line()}"
    )
    if args.keep:
        print("lakes kept in", base)
    else:
        import shutil

        shutil.rmtree(base)
    return 1 if figures.broken else 0


if __name__ == "__main__":
    sys.exit(main())
