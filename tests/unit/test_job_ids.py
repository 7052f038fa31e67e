"""Job ids: UUID version 7, increasing within the process, built without UUID.__init__."""

from __future__ import annotations

import secrets
import threading
import time
import uuid

import pytest

from dms.jobs import _ids
from dms.jobs._ids import new_job_ids, uuid_of, uuids_of


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


def test_uuids_of_builds_the_same_uuids_as_the_constructor() -> None:
    values = [uuid.uuid4().int for _ in range(3)] + [0, 2**128 - 1]
    made = uuids_of(values)
    expected = [uuid.UUID(int=value) for value in values]
    assert made == expected
    assert [type(one) for one in made] == [uuid.UUID] * len(values)
    assert [str(one) for one in made] == [str(one) for one in expected]
    assert [one.is_safe for one in made] == [one.is_safe for one in expected]
    assert uuids_of([]) == []


def _one_at_a_time(last: tuple[int, int], now_ms: int, drawn: int, count: int) -> list[int]:
    """The ids as RFC 9562 method 2 makes them, one increment per id (the reference)."""
    ms, random = last
    values = []
    for _ in range(count):
        if now_ms > ms:
            ms, random = now_ms, drawn
        elif random < _ids._RANDOM_MASK:
            random += 1
        else:
            ms, random = ms + 1, drawn
        values.append(_ids._layout(ms, random))
    return values


@pytest.mark.parametrize(
    ("last", "drawn"),
    [
        ((0, 0), 12345),  # a new millisecond
        ((0, 0), 0),
        ((0, 0), _ids._RAND_B_MASK - 3),  # a new millisecond whose draw carries into rand_a
        ((2**40, 7), 1),  # the same millisecond (the clock is behind the last id)
        ((2**40, (5 << 62) | (_ids._RAND_B_MASK - 3)), 1),  # incrementing carries into rand_a
        ((2**40, _ids._RANDOM_MASK - 3), 99),  # the counter overflows: the next millisecond
    ],
)
def test_a_call_makes_the_ids_of_one_increment_each(
    monkeypatch: pytest.MonkeyPatch, last: tuple[int, int], drawn: int
) -> None:
    now_ms = 2**39
    monkeypatch.setattr(_ids, "_last", last)
    monkeypatch.setattr(time, "time_ns", lambda: now_ms * 1_000_000)
    monkeypatch.setattr(secrets, "randbits", lambda bits: drawn)
    expected = _one_at_a_time(last, now_ms, drawn, 13)
    assert [job_id.int for job_id in new_job_ids(10)] == expected[:10]
    assert [job_id.int for job_id in new_job_ids(3)] == expected[10:]  # and the next call on
