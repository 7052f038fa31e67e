"""The JSON that ``--json`` prints: every value type of dms's results, as plain JSON."""

from __future__ import annotations

import enum
import json
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from dms.cli.output import emit_json


class Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Row:
    id: uuid.UUID
    at: datetime
    age: timedelta | None
    colour: Colour
    tags: frozenset[str]


def test_results_print_as_one_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    row_id = uuid.uuid4()
    at = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)
    emit_json(
        {
            "rows": [
                Row(
                    id=row_id,
                    at=at,
                    age=timedelta(seconds=1.5),
                    colour=Colour.RED,
                    tags=frozenset({"a"}),
                )
            ],
            "amount": Decimal("1.10"),
            "day": date(2026, 1, 2),
        }
    )

    assert json.loads(capsys.readouterr().out) == {
        "rows": [
            {"id": str(row_id), "at": at.isoformat(), "age": 1.5, "colour": "red", "tags": ["a"]}
        ],
        "amount": "1.10",
        "day": "2026-01-02",
    }


def test_a_value_without_a_json_form_is_a_bug_not_silence() -> None:
    with pytest.raises(TypeError, match="cannot print object"):
        emit_json(object())
