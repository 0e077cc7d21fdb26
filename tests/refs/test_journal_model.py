"""The journal against a plain dict model, under random sequences of operations.

Two ref managers share one store (like two processes with their own caches);
every step goes through one of them, and afterwards the other (and a fresh
one) must agree with the model on heads, history, versions, time lookups,
live databases and retention.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from merkle.errors import NotFoundError
from merkle.refs import JournalConflictError, RefManager
from merkle.storage import open_store

from .helpers import Now, root

NAMES = st.sampled_from(["a", "b", "c"])
MANAGERS = st.integers(0, 1)


@dataclass
class ModelDb:
    roots: list[str | None] = field(default_factory=list)  # by version; None = drop
    times: list[datetime] = field(default_factory=list)
    oldest: int = 0

    @property
    def head(self) -> int:
        return len(self.roots) - 1

    @property
    def live(self) -> bool:
        return bool(self.roots) and self.roots[-1] is not None


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store = open_store("memory://")
        self.now = Now()
        self.managers = [RefManager(self.store, now=self.now), RefManager(self.store, now=self.now)]
        self.model: dict[str, ModelDb] = {}
        self.counter = 0

    def teardown(self) -> None:
        self.store.close()

    def fresh_root(self) -> str:
        self.counter += 1
        return root(self.counter)

    def record(self, db: str, new_root: str | None) -> None:
        entry = self.model.setdefault(db, ModelDb())
        entry.roots.append(new_root)
        entry.times.append(self.now.value)

    @rule(seconds=st.sampled_from([0, 0, 1, 3600]))
    def tick(self, seconds: int) -> None:
        self.now.advance(seconds)

    @rule(db=NAMES, m=MANAGERS)
    def create(self, db: str, m: int) -> None:
        model = self.model.get(db)
        new_root = self.fresh_root()
        if model is not None and model.live:
            with pytest.raises(JournalConflictError) as info:
                self.managers[m].commit(db, None, new_root)
            assert info.value.found == model.head
            return
        entry = self.managers[m].commit(db, None, new_root)
        assert entry.version == (0 if model is None else model.head + 1)
        self.record(db, new_root)

    @rule(db=NAMES, m=MANAGERS, offset=st.sampled_from([0, 0, 0, 1, 2, -1]))
    def commit(self, db: str, m: int, offset: int) -> None:
        model = self.model.get(db)
        if model is None:
            return
        expected = model.head - offset
        if expected < 0:
            return
        new_root = self.fresh_root()
        if expected != model.head:
            with pytest.raises(JournalConflictError) as info:
                self.managers[m].commit(db, expected, new_root)
            assert info.value.found == model.head
        elif not model.live:
            with pytest.raises(NotFoundError, match="dropped"):
                self.managers[m].commit(db, expected, new_root)
        else:
            entry = self.managers[m].commit(db, expected, new_root)
            assert entry.version == model.head + 1
            self.record(db, new_root)

    @rule(db=NAMES, m=MANAGERS)
    def drop(self, db: str, m: int) -> None:
        model = self.model.get(db)
        if model is None or not model.live:
            try:
                self.managers[m].drop(db)
            except NotFoundError:
                return
            raise AssertionError("dropped a database that is not live")
        assert self.managers[m].drop(db).version == model.head + 1
        self.record(db, None)

    @rule(source=NAMES, dest=NAMES, m=MANAGERS)
    def clone(self, source: str, dest: str, m: int) -> None:
        target = dest
        src, tgt = self.model.get(source), self.model.get(target)
        if src is None or not src.live or (tgt is not None and tgt.live):
            try:
                self.managers[m].clone(source, target)
            except (NotFoundError, JournalConflictError):
                return
            raise AssertionError("cloned where it should not")
        entry = self.managers[m].clone(source, target)
        assert entry.forked_from == {"db": source, "version": src.head}
        self.record(target, src.roots[-1])

    @rule(db=NAMES, m=MANAGERS, before=st.integers(0, 30))
    def trim(self, db: str, m: int, before: int) -> None:
        model = self.model.get(db)
        if model is None:
            return
        stop = min(before, model.head)
        removed = max(0, stop - model.oldest)
        assert self.managers[m].trim(db, before) == removed
        model.oldest = max(model.oldest, stop)

    @invariant()
    def agrees_with_the_model(self) -> None:
        for reader in (self.managers[0], self.managers[1], RefManager(self.store)):
            assert reader.list_dbs() == sorted(n for n, m in self.model.items() if m.live)
            for db, model in self.model.items():
                head = reader.head(db)
                assert head is not None
                assert (head.version, head.root) == (model.head, model.roots[-1])
                assert reader.oldest_version(db) == model.oldest
                history = reader.history(db)
                assert [e.version for e in history] == list(range(model.head, model.oldest - 1, -1))
                assert [e.root for e in history] == model.roots[model.oldest :][::-1]
        reader = RefManager(self.store)
        for db, model in self.model.items():
            for version in range(model.oldest):
                with pytest.raises(NotFoundError, match="removed by retention"):
                    reader.get(db, version)
            for version in range(model.oldest, model.head + 1):
                when = model.times[version]
                newest = max(v for v, t in enumerate(model.times) if t <= when)
                assert reader.at(db, when).version == newest


TestJournalModel = JournalMachine.TestCase
TestJournalModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
