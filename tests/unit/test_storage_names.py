"""How a storage key's segments become file names: one-to-one, never hidden, never too long."""

from __future__ import annotations

import pytest

from dms.storage import MAX_SEGMENT_BYTES, segment_path


@pytest.mark.parametrize(
    ("segment", "name"),
    [
        ("acme", "acme"),
        ("a" * 64, "a" * 64),
        ("with space + plus@at.txt", "with space + plus@at.txt"),
        ("café.txt", "café.txt"),
        (".hidden", "%2Ehidden"),
        ("a.b", "a.b"),
        ("100%", "100%25"),
        ("a:b", "a%3Ab"),
        ("new\nline", "new%0Aline"),
    ],
)
def test_segments_map_one_to_one(segment: str, name: str) -> None:
    assert segment_path(segment) == name


@pytest.mark.parametrize("segment", ["x" * MAX_SEGMENT_BYTES, "x" * (MAX_SEGMENT_BYTES + 1)])
def test_long_plain_segments_stay_within_a_file_name(segment: str) -> None:
    name = segment_path(segment)
    assert len(name.encode()) <= MAX_SEGMENT_BYTES
    assert (name == segment) == (len(segment) <= MAX_SEGMENT_BYTES)
    assert segment_path("x" * (MAX_SEGMENT_BYTES + 2)) != segment_path(
        "x" * (MAX_SEGMENT_BYTES + 1)
    )
