"""The in-memory cache of an object store's metadata files: bounded in bytes, configurable.

(What it saves at the store — no manifest GET on a second scan — is counted through the relay
in tests/flight_server/test_s3_faults.py.)"""

from __future__ import annotations

import pytest

from catalog.object_reads import (
    CACHE_BYTES_ENV,
    DEFAULT_CACHE_BYTES,
    MetadataBytes,
    cache_budget,
    is_immutable_metadata,
)


def test_least_recently_used_files_go_first_and_the_bytes_stay_within_the_budget() -> None:
    cache = MetadataBytes(budget=800)
    for name in "abcd":
        cache.put(f"s3://b/t/metadata/{name}.avro", name.encode() * 100)
    assert cache.size == 400
    assert cache.get("s3://b/t/metadata/a.avro") == b"a" * 100  # a is now the most recent
    for name in "efgh":
        cache.put(f"s3://b/t/metadata/{name}.avro", name.encode() * 100)
    cache.put("s3://b/t/metadata/i.avro", b"i" * 100)
    assert cache.size == 800
    assert cache.get("s3://b/t/metadata/b.avro") is None, "the least recently used went first"
    assert cache.get("s3://b/t/metadata/a.avro") is not None
    cache.put("s3://b/t/metadata/big.avro", b"x" * 101)  # over an eighth of the budget
    assert cache.get("s3://b/t/metadata/big.avro") is None
    cache.discard("s3://b/t/metadata/a.avro")
    assert cache.get("s3://b/t/metadata/a.avro") is None and cache.size == 700


def test_the_budget_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_BYTES_ENV, "4096")
    assert cache_budget() == 4096
    monkeypatch.setenv(CACHE_BYTES_ENV, "0")
    assert cache_budget() == 0
    zero = MetadataBytes(0)
    zero.put("s3://b/t/metadata/a.avro", b"a")
    assert zero.get("s3://b/t/metadata/a.avro") is None and zero.size == 0
    monkeypatch.setenv(CACHE_BYTES_ENV, "lots")
    assert cache_budget() == DEFAULT_CACHE_BYTES
    monkeypatch.delenv(CACHE_BYTES_ENV)
    assert cache_budget() == DEFAULT_CACHE_BYTES


@pytest.mark.parametrize(("location", "immutable"), [
    ("s3://b/wh/ns/t/metadata/snap-1-0-abc.avro", True),
    ("s3://b/wh/ns/t/metadata/00001-abc.metadata.json", True),
    ("s3://b/wh/ns/t/data/abc.parquet", False),
    ("s3://b/wh/ns/t/metadata/version-hint.text", False),
])
def test_only_manifests_lists_and_metadata_files_are_kept(location: str, immutable: bool) -> None:
    assert is_immutable_metadata(location) is immutable
