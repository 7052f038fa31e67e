"""A local blob store refuses what it cannot use with ``ValidationError``, writing nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dms.errors import ValidationError
from dms.storage import LocalBlobStore


@pytest.mark.parametrize("root", [5, None, b"blobs", ["blobs"]])
def test_a_root_that_is_not_a_path_is_refused(root: object) -> None:
    with pytest.raises(ValidationError, match="root"):
        LocalBlobStore(root)  # type: ignore[arg-type]


@pytest.mark.parametrize("durable", ["no", 0, None])
def test_durable_must_be_a_bool(tmp_path: Path, durable: object) -> None:
    with pytest.raises(ValidationError, match="durable"):
        LocalBlobStore(tmp_path, durable=durable)  # type: ignore[arg-type]


def test_a_root_given_as_text_is_a_path_and_content_any_bytes(tmp_path: Path) -> None:
    store = LocalBlobStore(str(tmp_path / "blobs"), durable=False)

    store.put("a/b", b"x")
    store.put("a/c", bytearray(b"y"))  # any bytes-like content

    assert (tmp_path / "blobs" / "a" / "b").read_bytes() == b"x"
    assert store.get("a/c") == b"y"


@pytest.mark.parametrize("content", ["text", None, 5, [1]])
def test_content_that_is_not_bytes_is_refused_and_nothing_written(
    tmp_path: Path, content: object
) -> None:
    store = LocalBlobStore(tmp_path, durable=False)

    with pytest.raises(ValidationError, match="content"):
        store.put("a/b", content)  # type: ignore[arg-type]

    assert list(tmp_path.iterdir()) == []
