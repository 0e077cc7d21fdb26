"""Lake URIs: which backend ``open_store`` picks, and the clear errors for bad ones."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from merkle.errors import UsageError
from merkle.storage import base, open_store, register_scheme, supported_schemes
from merkle.storage.file import FileStore
from merkle.storage.memory import MemoryStore
from merkle.storage.s3 import S3Store


@pytest.fixture
def registry() -> Iterator[None]:
    """Undo whatever a test registers."""
    saved = dict(base._REGISTRY), dict(base._LOADED)
    yield
    base._REGISTRY.clear()
    base._REGISTRY.update(saved[0])
    base._LOADED.clear()
    base._LOADED.update(saved[1])


def test_memory_uri_opens_a_fresh_store_each_time() -> None:
    first, second = open_store("memory://"), open_store("memory://")
    assert isinstance(first, MemoryStore)
    first.put("k", b"v")
    assert not second.exists("k")


def test_named_memory_uri_is_shared_within_the_process() -> None:
    first = open_store("memory://uri-test-shared")
    second = open_store("memory://uri-test-shared")
    assert first is second
    assert first.uri == "memory://uri-test-shared"
    assert open_store("memory://uri-test-other") is not first


def test_file_uri(tmp_path: Path) -> None:
    store = open_store((tmp_path / "lake").as_uri())
    assert isinstance(store, FileStore)
    assert store.root == str(tmp_path / "lake")
    assert store.uri == "file://" + str(tmp_path / "lake")


def test_file_uri_with_localhost(tmp_path: Path) -> None:
    store = open_store(f"file://localhost{tmp_path}/lake")
    assert isinstance(store, FileStore)
    assert store.root == str(tmp_path / "lake")


def test_plain_absolute_and_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absolute = open_store(str(tmp_path / "abs"))
    assert isinstance(absolute, FileStore)
    assert absolute.root == str(tmp_path / "abs")
    monkeypatch.chdir(tmp_path)
    relative = open_store("rel/lake")
    assert isinstance(relative, FileStore)
    assert relative.root == os.path.join(str(tmp_path), "rel", "lake")
    via_pathlib = open_store(Path("rel") / "lake")
    assert isinstance(via_pathlib, FileStore)
    assert via_pathlib.root == relative.root


def test_a_path_and_its_uri_open_the_same_lake(tmp_path: Path) -> None:
    open_store(tmp_path / "lake").put("k", b"v")
    assert open_store((tmp_path / "lake").as_uri()).get("k") == b"v"


@pytest.mark.parametrize(
    ("uri", "bucket", "prefix", "reopens_as"),
    [
        ("s3://my-bucket/lake", "my-bucket", "lake/", "s3://my-bucket/lake"),
        ("s3://my-bucket/a/b/", "my-bucket", "a/b/", "s3://my-bucket/a/b"),
        ("s3://my-bucket", "my-bucket", "", "s3://my-bucket"),
        ("s3://my-bucket/", "my-bucket", "", "s3://my-bucket"),
        ("S3://my.bucket.1/x", "my.bucket.1", "x/", "s3://my.bucket.1/x"),
    ],
)
def test_s3_uri(uri: str, bucket: str, prefix: str, reopens_as: str) -> None:
    # Opening makes a client only; nothing is sent until the first request.
    with open_store(uri, endpoint_url="http://127.0.0.1:9", region_name="us-east-1") as store:
        assert isinstance(store, S3Store)
        assert (store.bucket, store.prefix, store.uri) == (bucket, prefix, reopens_as)
        assert store.endpoint == "http://127.0.0.1:9"


def test_unknown_scheme_lists_the_supported_ones() -> None:
    with pytest.raises(UsageError, match="'gs'") as caught:
        open_store("gs://bucket/lake")
    for scheme in ("memory://", "file://", "s3://"):
        assert scheme in str(caught.value)


def test_supported_schemes() -> None:
    assert {"memory", "file", "s3"} <= set(supported_schemes())
    assert supported_schemes() == sorted(supported_schemes())


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("file://relative/path", "file:///absolute"),
        ("file://", "absolute"),
        ("s3://", "name a bucket"),
        ("s3:///lake", "name a bucket"),
        ("://x", "scheme"),
        ("s3://Upper-Case", "bucket name"),
        ("s3://ab", "bucket name"),
        ("s3://bad_bucket/x", "bucket name"),
        ("s3://bucket..dots", "bucket name"),
        ("s3://192.168.1.1/x", "bucket name"),
        ("s3://user@bucket/x", "bucket name"),
        ("s3://bucket:9000/x", "bucket name"),
        ("s3://bucket/a/../b", "prefix"),
        ("s3://bucket/.hidden", "prefix"),
        ("s3://bucket/lake?region=x", "query"),
        ("memory://x#frag", "memory"),
        ("c:lake", "malformed"),
        ("", "non-empty"),
        ("   ", "non-empty"),
    ],
)
def test_malformed_uris_are_usage_errors(uri: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        open_store(uri)


def test_a_uri_must_be_a_string() -> None:
    with pytest.raises(UsageError, match="non-empty string"):
        open_store(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("uri", ["memory://", "file:///tmp/x", "s3://bucket/x"])
def test_unknown_options_are_usage_errors(uri: str) -> None:
    with pytest.raises(UsageError, match="option"):
        open_store(uri, no_such_option=1)


def test_register_scheme_with_a_lazy_class_path(registry: None) -> None:
    register_scheme("scratch", "merkle.storage.memory:MemoryStore")
    assert "scratch" in supported_schemes()
    assert "scratch" not in base._LOADED  # nothing imported until first use
    store = open_store("scratch://lazy-test")
    assert isinstance(store, MemoryStore)
    assert base._LOADED["scratch"] is MemoryStore


def test_register_scheme_with_a_class(registry: None) -> None:
    class Custom(MemoryStore):
        pass

    register_scheme("Custom", Custom)
    assert isinstance(open_store("custom://custom-class-test"), Custom)


def test_a_lazy_backend_that_cannot_load_is_a_usage_error(registry: None) -> None:
    register_scheme("broken", "no_such_module_here:Store")  # registering imports nothing
    with pytest.raises(UsageError, match="no_such_module_here"):
        open_store("broken://x")
    register_scheme("notastore", "merkle.errors:MerkleError")
    with pytest.raises(UsageError, match="not an ObjectStore"):
        open_store("notastore://x")


@pytest.mark.parametrize(
    ("scheme", "target"),
    [("", "m:C"), ("1x", "m:C"), ("a b", "m:C"), ("ok", "no-colon"), ("ok", ":C"), ("ok", 5)],
)
def test_register_scheme_rejects_bad_arguments(registry: None, scheme: str, target: object) -> None:
    with pytest.raises(UsageError):
        register_scheme(scheme, target)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["sales%41", "q?a", "h#a", "both %2F?#", "space and ü"])
def test_a_file_location_with_uri_characters_opens_itself_again(tmp_path: Path, name: str) -> None:
    """Before: a plain path 'sales%41' made the lake 'salesA', 'q?a' the lake 'q'; and a
    store's URI (what pickling and Spark tasks re-open) decoded to another place."""
    import pickle

    path = str(tmp_path / name)
    store = open_store(path)
    assert isinstance(store, FileStore)
    assert store.root == path
    store.put("k", b"v")
    for again in (open_store(store.uri), pickle.loads(pickle.dumps(store))):
        assert isinstance(again, FileStore)
        assert again.root == path
        assert again.get("k") == b"v"
    assert sorted(os.listdir(tmp_path)) == [name]


def test_a_file_uri_with_a_query_or_fragment_is_refused(tmp_path: Path) -> None:
    for uri in (f"file://{tmp_path}/lake?x=1", f"file://{tmp_path}/lake#top"):
        with pytest.raises(UsageError, match="no query or fragment"):
            open_store(uri)


@pytest.mark.s3
@pytest.mark.parametrize("prefix", ["team%42", "q?a", "h#a"])
def test_an_s3_prefix_with_uri_characters_opens_itself_again(
    moto_endpoint: str, prefix: str
) -> None:
    """Before: a lake at prefix 'team%42' (URI s3://b/team%2542) pickled to a store of
    prefix 'teamB', a neighbour lake; 'q?a' and 'h#a' could not be re-opened at all."""
    import pickle

    from conftest import new_bucket

    from merkle.storage.base import quote_location

    bucket = new_bucket(moto_endpoint)
    options = {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}
    store = open_store(f"s3://{bucket}/{quote_location(prefix)}", **options)
    assert isinstance(store, S3Store)
    assert store.prefix == prefix + "/"
    store.put("k", b"v")
    for again in (open_store(store.uri, **options), pickle.loads(pickle.dumps(store))):
        assert isinstance(again, S3Store)
        assert again.prefix == prefix + "/"
        assert again.get("k") == b"v"
