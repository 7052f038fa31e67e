"""Search values: cursors, page sizes, filters and the domain types' properties; no database."""

from __future__ import annotations

import base64
import uuid
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dms.domain import Cursor, DocumentQuery, FieldOption, FieldType, MetadataFilter
from dms.domain.search import MAX_PAGE_SIZE, check_page_size
from dms.errors import ValidationError


@given(title_key=st.text(), id_=st.uuids())
def test_cursor_round_trips_through_its_token(title_key: str, id_: uuid.UUID) -> None:
    cursor = Cursor(title_key=title_key, id=id_)
    token = cursor.encode()
    assert Cursor.decode(token) == cursor
    assert token == base64.urlsafe_b64encode(base64.urlsafe_b64decode(token)).decode()


@pytest.mark.parametrize(
    "token",
    [
        "",
        "not base64!",
        base64.urlsafe_b64encode(b"not json").decode(),
        base64.urlsafe_b64encode(b'["only one"]').decode(),
        base64.urlsafe_b64encode(b'["title", "not-a-uuid"]').decode(),
        base64.urlsafe_b64encode(b'{"title": 1}').decode(),
        base64.urlsafe_b64encode(b"null").decode(),
    ],
)
def test_bad_cursor_tokens_are_refused(token: str) -> None:
    with pytest.raises(ValidationError, match="not a page cursor"):
        Cursor.decode(token)


@pytest.mark.parametrize("limit", [1, 50, MAX_PAGE_SIZE])
def test_page_sizes_in_range(limit: int) -> None:
    assert check_page_size(limit) == limit


@pytest.mark.parametrize("limit", [0, -1, MAX_PAGE_SIZE + 1, True, 10.0, "10", None])
def test_page_sizes_out_of_range_or_not_int(limit: object) -> None:
    with pytest.raises(
        ValidationError, match=f"page size must be an int from 1 to {MAX_PAGE_SIZE}"
    ):
        check_page_size(limit)  # type: ignore[arg-type]


def test_metadata_filter_needs_a_condition() -> None:
    field_id = uuid.uuid4()
    with pytest.raises(ValidationError, match=str(field_id)):
        MetadataFilter(field_id=field_id)
    assert MetadataFilter(field_id=field_id, at_least=1).at_least == 1
    assert MetadataFilter(field_id=field_id, equals=0).equals == 0


def test_document_query_defaults_search_everything_below_a_folder() -> None:
    query = DocumentQuery()
    assert query.folder_id is None
    assert query.include_subfolders
    assert query.tags_all == frozenset()
    assert query.metadata == ()


def test_field_type_properties() -> None:
    assert {k for k in FieldType if k.has_options} == {FieldType.SELECT, FieldType.MULTI_SELECT}
    ordered = {k for k in FieldType if k.is_ordered}
    assert ordered == {FieldType.INT, FieldType.DECIMAL, FieldType.DATE}
    assert FieldType("multi_select") is FieldType.MULTI_SELECT


def test_retired_option() -> None:
    live = FieldOption(
        id=uuid.uuid4(), field_id=uuid.uuid4(), value="a", position=0, retired_at=None
    )
    retired = FieldOption(
        id=uuid.uuid4(),
        field_id=uuid.uuid4(),
        value="b",
        position=1,
        retired_at=datetime.now(timezone.utc),
    )
    assert not live.is_retired
    assert retired.is_retired
