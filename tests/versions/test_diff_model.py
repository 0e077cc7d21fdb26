"""Model test of diff: random histories on two branches, diff against the models' difference."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

import merkle

from .history import HISTORY, apply, copy_model, expected_diff, state


def _check(old: merkle.Database, new: merkle.Database, old_model: Any, new_model: Any) -> None:
    assert state(old) == old_model
    assert state(new) == new_model
    diff = new.diff(old)
    names = set(old_model) | set(new_model)
    for name in sorted(names):
        expected = expected_diff(old_model, new_model, name)
        if name in old_model and name in new_model and not expected:
            if name in diff.tables:  # changed settings or rows rewritten identically
                assert diff[name].records() == []
            continue
        if name not in old_model and name not in new_model:
            continue
        got = diff[name].records() if name in diff.tables else []
        assert got == expected, name
        counts = diff[name].counts() if name in diff.tables else None
        if counts is not None:
            kinds = [r["change"] for r in expected]
            assert (counts.inserted, counts.updated, counts.deleted) == (
                kinds.count("insert"),
                kinds.count("update"),
                kinds.count("delete"),
            )
    assert sorted(diff.created) == sorted(set(new_model) - set(old_model))
    assert sorted(diff.dropped) == sorted(set(old_model) - set(new_model))


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(base=HISTORY, ours=HISTORY, theirs=HISTORY)
def test_diff_of_two_branches_equals_the_difference_of_their_contents(
    base: list[Any], ours: list[Any], theirs: list[Any]
) -> None:
    with merkle.connect("memory://") as conn:
        model: dict[str, Any] = {}
        main = apply(conn.create_db("main"), model, [("create", "a", None), *base])
        base_model = copy_model(model)
        dev = conn.create_db("dev", root=main)
        dev_model = copy_model(model)
        main = apply(main, model, ours)
        dev = apply(dev, dev_model, theirs)
        _check(main, dev, model, dev_model)  # across branches
        _check(dev, main, dev_model, model)  # and back
        base_db = conn.open_db("dev", version=0)
        _check(base_db, main, base_model, model)  # along one branch's history
        # An uncommitted value diffs with its own writes.
        pending = main.write("a", [{"k": 1, "v": "new"}]) if "a" in model else main
        pending_model = copy_model(model)
        if "a" in model:
            pending_model["a"][1] = {"k": 1, "v": "new"}
        _check(main, pending, model, pending_model)
