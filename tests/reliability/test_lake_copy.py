"""Copying a lake's files while writers run, as doc/operations.md ("Backups") says.

The documented order is everything else first and ``blocks/`` last: a commit
makes its blocks durable before the journal entry that names them, so every
entry the copy holds finds its blocks. The docs once said the reverse
(blocks first, refs last), which leaves the copy an entry whose blocks it
never copied when a commit lands between the two steps: the copy's head was
unreadable and ``merkle verify`` reported missing blocks.
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from pathlib import Path

import merkle

#: Writes in flight (a file store writes each object to a ``.tmp-*`` file, then renames
#: it): the documented copy skips them; they may vanish while the copy runs.
_IN_FLIGHT = shutil.ignore_patterns("*.tmp-*")


def _copy_if_there(source: str, target: str) -> None:
    """Copy one small object; one that went meanwhile (a lease released) is not needed."""
    with contextlib.suppress(FileNotFoundError):
        shutil.copy2(source, target)


def _copy_documented(src: Path, dst: Path, between: object = None) -> None:
    dst.mkdir()
    for item in sorted(src.iterdir()):
        if item.name != "blocks":
            if item.is_dir():
                shutil.copytree(
                    item, dst / item.name, ignore=_IN_FLIGHT, copy_function=_copy_if_there
                )
            else:
                shutil.copy2(item, dst / item.name)
    if callable(between):
        between()
    shutil.copytree(src / "blocks", dst / "blocks", ignore=_IN_FLIGHT)


def _check_copy(dst: Path) -> list[int]:
    with merkle.connect(dst.as_uri(), create=False) as copy:
        report = merkle.verify(copy)
        assert report.ok, report.summary()
        versions = [v.version for v in copy.history("shop")]
        for version in versions[:-1]:  # version 0: create_db's, before the table
            rows = copy.open_db("shop", version=version).to_arrow("t")
            assert rows.num_rows == version - 1
        return versions


def _shop(uri: str) -> merkle.Database:
    with merkle.connect(uri) as conn:
        db = conn.create_db("shop").create_table("t", key="id").commit()
        return db.write("t", [{"id": 0, "v": "a"}]).commit()


def test_a_commit_between_the_two_steps_leaves_a_consistent_copy(tmp_path: Path) -> None:
    src, dst = tmp_path / "lake", tmp_path / "copy"
    _shop(src.as_uri())

    def commit_meanwhile() -> None:
        with merkle.connect(src.as_uri()) as conn:
            conn.open_db("shop").write("t", [{"id": 1, "v": "b"}]).commit()

    _copy_documented(src, dst, commit_meanwhile)
    assert _check_copy(dst) == [2, 1, 0]  # the copy is the lake as its refs were copied


def test_copies_taken_while_a_writer_commits_all_verify(tmp_path: Path) -> None:
    src = tmp_path / "lake"
    _shop(src.as_uri())
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            with merkle.connect(src.as_uri()) as conn:
                db = conn.open_db("shop")
                key = db.to_arrow("t").num_rows
                while not stop.is_set():
                    db = db.write("t", [{"id": key, "v": "x" * 200}]).commit()
                    key += 1
        except BaseException as exc:  # reported below
            failures.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        heads = []
        for i in range(3):
            dst = tmp_path / f"copy{i}"
            _copy_documented(src, dst)
            heads.append(_check_copy(dst)[0])
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert heads == sorted(heads)


def test_blocks_first_is_the_unsafe_order_the_docs_warn_of(tmp_path: Path) -> None:
    src, dst = tmp_path / "lake", tmp_path / "copy"
    _shop(src.as_uri())
    dst.mkdir()
    shutil.copytree(src / "blocks", dst / "blocks")
    with merkle.connect(src.as_uri()) as conn:
        conn.open_db("shop").write("t", [{"id": 1, "v": "b"}]).commit()
    for item in src.iterdir():
        if item.name != "blocks":
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, dst / item.name)
    with merkle.connect(dst.as_uri(), create=False) as copy:
        assert not merkle.verify(copy).ok
