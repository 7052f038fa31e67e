"""The batch documents of dms.jobs._wire, read back in Python."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from typing import Any

from dms.jobs import _wire as wire


def test_a_job_id_is_read_from_its_text() -> None:
    job_id = uuid.uuid4()
    assert wire.job_id(str(job_id)) == job_id
    assert wire.job_id(job_id.hex) == job_id


def test_timestamps_are_utc_and_exact_to_the_microsecond() -> None:
    convert = wire.Timestamps()
    # What date_part('epoch', ...) returns for 2026-12-03 05:14:26.123457+00: the nearest double.
    moment = datetime(2026, 12, 3, 5, 14, 26, 123457, tzinfo=timezone.utc)
    seconds = (moment - datetime(1970, 1, 1, tzinfo=timezone.utc)).total_seconds()
    assert convert(seconds) == moment
    assert convert(seconds).tzinfo is timezone.utc


def test_every_microsecond_of_a_second_survives_the_double() -> None:
    convert = wire.Timestamps()
    base = 1_796_000_000  # 2026
    for micros in range(0, 1_000_000, 997):
        seconds = float(f"{base}.{micros:06d}")
        assert convert(seconds).microsecond == micros


def test_a_timestamp_seen_before_is_the_same_object() -> None:
    convert = wire.Timestamps()
    assert convert(1_796_000_000.5) is convert(1_796_000_000.5)


def test_a_document_is_read_as_the_json_it_is() -> None:
    rows: list[dict[str, Any]] = [{"id": "x", "payload": {"n": 1}}, {"id": "y", "payload": None}]
    assert wire.decode(json.dumps(rows)) == rows
