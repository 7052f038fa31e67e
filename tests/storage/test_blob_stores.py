"""Both blob stores keep the :class:`~dms.storage.BlobStore` contract, tested on each alike.

The S3 store runs against a real S3-compatible server started for the session (SeaweedFS).
"""

from __future__ import annotations

import hashlib
import io
import os
import time
import tracemalloc
from datetime import timedelta
from pathlib import Path

import pytest

from dms.errors import NotFound, StorageError, ValidationError
from dms.storage import (
    CHUNK_BYTES,
    BlobStore,
    Content,
    LocalBlobStore,
    S3BlobStore,
    content_key,
    open_store,
    segment_path,
)

AWKWARD_KEYS = [
    "acme/with space + plus@at.txt",
    "acme/.hidden",
    "acme/100%",
    "acme/a\\b:c*?",
    "acme/é" * 3,
    "acme/" + "é" * 250,
]
#: A file well above a chunk and an S3 part, to see that neither side holds it whole.
LARGE_BYTES = 48 << 20


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStore:
    if request.param == "local":
        return LocalBlobStore(tmp_path / "blobs", durable=False)
    s3: S3BlobStore = request.getfixturevalue("s3_store")
    return s3


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_any_key_of_a_real_path_round_trips(store: BlobStore, key: str) -> None:
    assert not store.exists(key)

    stored = store.put(key, key.encode())

    assert stored.sha256 == hashlib.sha256(key.encode()).hexdigest()
    assert store.exists(key)
    assert store.get(key) == key.encode()
    # A shortened spelling ends in a digest and cannot be read back: such keys are not listed.
    shortened = any("%~" in segment_path(segment) for segment in key.split("/"))
    assert [o.storage_key for o in store.objects("acme/")] == ([] if shortened else [key])


def test_a_missing_blob_is_not_found_and_deleting_it_says_so(store: BlobStore) -> None:
    with pytest.raises(NotFound, match="acme/none"):
        store.get("acme/none")
    with pytest.raises(NotFound, match="acme/none"):
        store.stream("acme/none")  # at once, not at the first chunk
    assert store.delete("acme/none") is False

    store.put("acme/some", b"x")
    assert store.delete("acme/some") is True
    assert not store.exists("acme/some")


def test_objects_and_namespaces_list_what_is_stored(store: BlobStore) -> None:
    key = content_key("acme", hashlib.sha256(b"a").hexdigest())
    store.put(key, b"a")
    store.put("acme/other/x", b"bb")
    store.put("globex/y", b"ccc")

    listed = {o.storage_key: o.size_bytes for o in store.objects("acme/")}

    assert listed == {key: 1, "acme/other/x": 2}
    assert {o.storage_key for o in store.objects("")} == {key, "acme/other/x", "globex/y"}
    assert store.namespaces() == ["acme", "globex"]
    with pytest.raises(ValidationError, match="prefix"):
        list(store.objects("acme"))  # whole segments only


def test_a_large_staged_file_is_stored_and_streamed_back_in_bounded_memory(
    store: BlobStore, tmp_path: Path
) -> None:
    source = tmp_path / "large.bin"
    with source.open("wb") as out:
        for index in range(LARGE_BYTES // CHUNK_BYTES):
            out.write(index.to_bytes(4, "big") * (CHUNK_BYTES // 4))
    with source.open("rb") as reading:
        staged = store.stage(reading)
    assert staged.staged is not None
    assert staged.size_bytes == LARGE_BYTES

    tracemalloc.start()
    try:
        store.put_many([("acme/large", staged)])
        digest = hashlib.sha256()
        for chunk in store.stream("acme/large"):
            assert len(chunk) <= CHUNK_BYTES
            digest.update(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert digest.hexdigest() == staged.sha256
    assert not staged.staged.exists()  # consumed
    assert peak < LARGE_BYTES // 2, f"{peak:,} bytes held at once"


def test_put_many_writes_several_at_once_and_discard_drops_a_staged_file(
    store: BlobStore,
) -> None:
    contents = [
        (f"acme/many/{n}", Content(sha256="0" * 64, size_bytes=1, data=bytes([n])))
        for n in range(20)
    ]
    store.put_many(contents)
    unused = store.stage(io.BytesIO(b"never stored"))

    store.discard(unused)

    assert all(store.get(key) == content.data for key, content in contents)
    assert unused.staged is not None
    assert not unused.staged.exists()


def test_the_staging_sweep_removes_old_leftovers_only(store: BlobStore) -> None:
    old = store.stage(io.BytesIO(b"left by a killed import"))
    fresh = store.stage(io.BytesIO(b"an import in progress"))
    assert old.staged is not None
    assert fresh.staged is not None
    two_hours_ago = time.time() - 7200
    os.utime(old.staged, (two_hours_ago, two_hours_ago))

    assert store.sweep_staging(older_than=timedelta(hours=1)) == 1

    assert not old.staged.exists()
    assert fresh.staged.exists()


@pytest.mark.parametrize(
    "key", ["", "/abs", "a//b", "a/../b", "a/./b", "a\x00b", "a\ud800", 5, None, "x" * 1025]
)
def test_a_key_no_store_accepts_is_refused_and_nothing_written(
    store: BlobStore, key: object
) -> None:
    for call in (store.exists, store.get, store.delete, lambda k: store.put(k, b"x")):
        with pytest.raises(ValidationError):
            call(key)  # type: ignore[arg-type]
    assert list(store.objects("")) == []


def test_an_s3_object_key_over_1024_bytes_is_refused(s3_store: S3BlobStore) -> None:
    key = "/".join(["é" * 200] * 4)  # accepted by the key rules, 1,600 bytes of UTF-8

    with pytest.raises(ValidationError, match="too long for S3"):
        s3_store.put(key, b"x")


def test_s3_failures_are_storage_errors_naming_the_store(s3_bucket: str, tmp_path: Path) -> None:
    missing_bucket = S3BlobStore(f"{s3_bucket}-none", staging_dir=tmp_path)
    with pytest.raises(StorageError, match=rf"s3://{s3_bucket}-none/: writing"):
        missing_bucket.put("acme/x", b"x")

    unreachable = S3BlobStore(s3_bucket, endpoint_url="http://127.0.0.1:9", staging_dir=tmp_path)
    with pytest.raises(StorageError, match="checking"):
        unreachable.exists("acme/x")


def test_open_store_takes_a_directory_or_an_s3_location(s3_bucket: str, tmp_path: Path) -> None:
    s3 = open_store(f"s3://{s3_bucket}/archive/2026")
    local = open_store(tmp_path)

    assert isinstance(s3, S3BlobStore)
    assert s3.location == f"s3://{s3_bucket}/archive/2026/"
    assert isinstance(local, LocalBlobStore)
    assert local.location == str(tmp_path)
    for wrong in ("", b"dir", None, 5, "s3:///prefix", "s3://"):
        with pytest.raises(ValidationError):
            open_store(wrong)  # type: ignore[arg-type]


def test_a_local_store_keeps_every_file_inside_its_root_with_a_name_a_file_system_takes(
    tmp_path: Path,
) -> None:
    store = LocalBlobStore(tmp_path / "blobs", durable=False)
    for key in AWKWARD_KEYS:
        store.put(key, key.encode())
    for key in ("../outside", "/etc/passwd", "a/../../b", "a/."):
        with pytest.raises(ValidationError):
            store.put(key, b"x")

    for key in AWKWARD_KEYS:
        path = store.path_of(key)
        assert path.read_bytes() == key.encode()
        assert path.is_relative_to(store.root)
        assert not any(part.startswith(".") for part in path.relative_to(store.root).parts)
        assert all(len(part.encode()) <= 255 for part in path.parts)
    assert list(tmp_path.rglob("outside")) == []
