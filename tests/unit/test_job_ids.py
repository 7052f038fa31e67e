"""Job ids: UUID version 7, increasing within the process, built without UUID.__init__."""

from __future__ import annotations

import threading
import time
import uuid

from dms.jobs.ids import new_job_ids, uuid_of


def test_ids_are_version_7_of_the_rfc_variant() -> None:
    for job_id in new_job_ids(50):
        assert job_id.version == 7
        assert job_id.variant == uuid.RFC_4122


def test_ids_carry_the_current_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    (job_id,) = new_job_ids(1)
    after = time.time_ns() // 1_000_000
    assert before <= job_id.int >> 80 <= after + 1


def test_ids_increase_within_a_call_and_across_calls_and_threads() -> None:
    made: list[list[uuid.UUID]] = []

    def make() -> None:
        for _ in range(50):
            made.append(new_job_ids(20))

    threads = [threading.Thread(target=make) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [job_id for batch in made for job_id in batch]
    assert len(set(every)) == 4 * 50 * 20
    for batch in made:
        assert batch == sorted(batch)
    assert all(a < b for a, b in zip(new_job_ids(3), new_job_ids(3)[1:], strict=False))


def test_uuid_of_builds_the_same_uuid_as_its_constructor() -> None:
    value = uuid.uuid4().int
    made = uuid_of(value)
    expected = uuid.UUID(int=value)
    assert made == expected
    assert hash(made) == hash(expected)
    assert str(made) == str(expected)
    assert made.is_safe is expected.is_safe
