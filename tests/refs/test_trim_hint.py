"""A trim leaves the HEAD hint naming the head, never a version it deletes.

Commits rewrite the hint every few versions, so after a trim the hint could
name a deleted version. merkle-db itself probes from the retention floor, but
merkle-db of 2026-11-22 (before the floor existed) took the hint and probed
the slots after it: finding the next one empty, it read an old version as the
head and committed into a freed slot below the floor, where no later
merkle-db looks (a compatibility probe ran that code on a lake this one had
trimmed: an acknowledged commit lost, and that code's GC then freed the real
head's blocks). The reader below is that old head search.
"""

from __future__ import annotations

import pytest

from merkle.errors import NotFoundError
from merkle.refs import RefManager
from merkle.refs.entry import decode_slot, entry_key, head_key
from merkle.storage import ObjectStore

ROOT = "bafyreigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"


def _old_head_search(store: ObjectStore, db: str) -> int:
    """The head as merkle-db before retention floors found it: the hint, then onwards."""
    hinted = decode_slot(store.get(head_key(db)), head_key(db), db, None)
    version = hinted.version
    while True:
        try:
            store.get(entry_key(db, version + 1))
        except NotFoundError:
            return version
        version += 1


@pytest.mark.parametrize(("commits", "keep_from"), [(7, 7), (6, 6), (11, 10), (12, 9)])
def test_after_a_trim_the_hint_names_a_kept_version(
    store: ObjectStore, commits: int, keep_from: int
) -> None:
    refs = RefManager(store)
    head = refs.commit("shop", None, ROOT)
    for _ in range(commits):
        head = refs.commit("shop", head.version, ROOT)
    refs.trim("shop", keep_from)
    assert _old_head_search(store, "shop") == head.version == commits
    assert refs.head("shop").version == commits  # type: ignore[union-attr]
    # And the next commit by this merkle-db is found by the old search too.
    head = refs.commit("shop", head.version, ROOT)
    assert _old_head_search(store, "shop") == head.version
