"""Job ids: UUID version 7, increasing within the process, built without UUID.__init__."""

from __future__ import annotations

import threading
import time
import uuid

from dms.jobs._ids import new_job_ids, uuid_of


def test_ids_are_version_7_of_the_rfc_variant() -> None:
    for job_id in new_job_ids(50):
        assert job_id.version == 7
        assert job_id.variant == uuid.RFC_4122


def test_ids_carry_the_current_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    (job_id,) = new_job_ids(1)
    after = time.time_ns() // 1_000_000
    assert before <= job_id.int >> 80 <= after + 1


def test_ids_increase_within_a_call_and_across_calls_of_a_thread() -> None:
    made: dict[int, list[uuid.UUID]] = {}

    def make(n: int) -> None:
        mine = made.setdefault(n, [])
        for _ in range(50):
            mine.extend(new_job_ids(20))

    threads = [threading.Thread(target=make, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [job_id for ids in made.values() for job_id in ids]
    assert len(set(every)) == 4 * 50 * 20
    for ids in made.values():
        assert ids == sorted(ids)


def test_a_call_after_another_returned_gives_greater_ids_whichever_thread_makes_it() -> None:
    # Two threads take turns, many times within each millisecond: the ids in the order the
    # calls were made must increase, whichever thread made them.
    made: list[uuid.UUID] = []
    turns = [threading.Semaphore(1), threading.Semaphore(0)]

    def take_turns(me: int) -> None:
        for _ in range(200):
            turns[me].acquire()
            made.extend(new_job_ids(3))
            turns[1 - me].release()

    threads = [threading.Thread(target=take_turns, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == len(made) == 2 * 200 * 3
    assert made == sorted(made)


def test_uuid_of_builds_the_same_uuid_as_its_constructor() -> None:
    value = uuid.uuid4().int
    made = uuid_of(value)
    expected = uuid.UUID(int=value)
    assert made == expected
    assert hash(made) == hash(expected)
    assert str(made) == str(expected)
    assert made.is_safe is expected.is_safe
