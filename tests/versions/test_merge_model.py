"""Model test of merge: two branches from a common base, merged with every resolver.

The reference merge is computed from the three materialized versions (base,
ours, theirs) as plain dicts, by the rules of doc/versions.md.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import merkle
from merkle.errors import MergeConflictError

from .history import HISTORY, apply, copy_model, state

Rows = dict[int, dict[str, Any]]


class _ConflictError(Exception):
    pass


def _resolve_by_function(conflict: dict[str, Any]) -> dict[str, Any] | None:
    ours, theirs = conflict["ours"], conflict["theirs"]
    if ours is None:
        return None
    return {"k": conflict["key"], "v": "resolved", "w": 0 if theirs is None else 1}


def _rows(base: Rows, ours: Rows, theirs: Rows, resolve: Any) -> Rows:
    out: Rows = {}
    for k in set(base) | set(ours) | set(theirs):
        b, o, t = base.get(k), ours.get(k), theirs.get(k)
        if o == t or t == b:
            value = o
        elif o == b:
            value = t
        elif resolve == "ours":
            value = o
        elif resolve == "theirs":
            value = t
        elif resolve == "fail":
            raise _ConflictError(k)
        else:
            value = resolve({"key": k, "base": b, "ours": o, "theirs": t})
        if value is not None:
            out[k] = value
    return out


def reference(
    base: Any, ours: Any, theirs: Any, gens: tuple[Any, Any, Any], resolve: Any
) -> dict[str, Rows]:
    """The merged contents, or _ConflictError when the merge must fail."""
    gb, go, gt = gens
    out = {}
    for name in set(base) | set(ours) | set(theirs):
        b, o, t = base.get(name), ours.get(name), theirs.get(name)

        def changed(
            x: Rows | None, g: dict[str, int], name: str = name, b: Rows | None = b
        ) -> bool:
            if x is None or b is None:
                return (x is None) != (b is None)
            return g.get(name) != gb.get(name) or x != b

        if not changed(t, gt):
            result = o
        elif not changed(o, go):
            result = t
        elif o is None and t is None:
            result = None
        elif (
            o is not None
            and t is not None
            and (b is None or go.get(name) == gb.get(name) == gt.get(name))
        ):
            result = _rows(b or {}, o, t, resolve)
        elif resolve in ("ours", "theirs"):
            result = o if resolve == "ours" else t
        else:
            raise _ConflictError(name)
        if result is not None:
            out[name] = result
    return out


@pytest.mark.slow
@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(base=HISTORY, ours=HISTORY, theirs=HISTORY)
def test_merge_equals_the_reference_merge_for_every_resolver(
    base: list[Any], ours: list[Any], theirs: list[Any]
) -> None:
    for resolve in ("fail", "ours", "theirs", _resolve_by_function):
        with merkle.connect("memory://") as conn:
            model: dict[str, Any] = {}
            gens: dict[str, int] = {}
            main = apply(conn.create_db("main"), model, [("create", "a", None), *base], gens)
            base_model, base_gens = copy_model(model), dict(gens)
            dev = conn.create_db("dev", root=main)
            dev_model, dev_gens = copy_model(model), dict(gens)
            main = apply(main, model, ours, gens)
            dev = apply(dev, dev_model, theirs, dev_gens)
            try:
                expected = reference(
                    base_model, model, dev_model, (base_gens, gens, dev_gens), resolve
                )
            except _ConflictError:
                with pytest.raises(MergeConflictError):
                    conn.merge("dev", "main", resolve=resolve)
                assert conn.open_db("main").version == main.version  # nothing committed
                continue
            merged = conn.merge("dev", "main", resolve=resolve)
            assert state(merged) == expected
            if merged.version != main.version:
                assert merged.entry.merged_from == {"db": "dev", "version": dev.version}
                assert merged.entry.parent == main.version
