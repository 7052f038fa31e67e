"""Claims are shared between tenants: one tenant's backlog never holds up another's jobs.

The claims here name a kind of their own, so that other tests' jobs never take part; the
tenants are registry rows only (jobs need nothing more).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy.engine import Engine

from dms import jobs
from dms.errors import ValidationError
from dms.jobs.claims import CLAIM_TENANTS, next_after

LONG_LEASE = timedelta(minutes=5)


def _enqueue(engine: Engine, kind: str, tenant: str, count: int, **options: object) -> None:
    with engine.begin() as conn:
        jobs.enqueue_many(
            conn,
            [jobs.NewJob(kind=kind, payload={}, tenant=tenant, **options)] * count,  # type: ignore[arg-type]
        )


def _claim(engine: Engine, kind: str, limit: int, after: str = "") -> list[jobs.Job]:
    with engine.begin() as conn:
        return jobs.dequeue(
            conn, "w", kinds=[kind], limit=limit, lease=LONG_LEASE, after_tenant=after
        )


def test_a_job_enqueued_behind_another_tenants_backlog_is_in_the_next_claim(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    bulk, other = tenants(2)
    _enqueue(engine, kind, bulk, 500)
    _enqueue(engine, kind, other, 1)  # after all of them: last in a first-come order

    claimed = Counter(job.tenant for job in _claim(engine, kind, limit=10))

    assert claimed == {bulk: 5, other: 1}


def test_a_tenant_alone_gets_the_whole_claim_in_its_own_order(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    (alone,) = tenants(1)
    _enqueue(engine, kind, alone, 30, priority=5)
    _enqueue(engine, kind, alone, 3, priority=-1)

    claimed = _claim(engine, kind, limit=20)

    assert len(claimed) == 20
    assert [job.priority for job in claimed[:3]] == [-1, -1, -1]


def test_claims_go_round_every_tenant(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    names = tenants(5)
    for name in names:
        _enqueue(engine, kind, name, 2)

    first = _claim(engine, kind, limit=3)  # walks three tenants
    after_first = next_after(first, 3, "")
    second = _claim(engine, kind, limit=3, after=after_first)  # the two after them, then the first
    after_second = next_after(second, 3, after_first)
    third = _claim(engine, kind, limit=3, after=after_second)

    assert Counter(job.tenant for job in first) == Counter(names[:3])
    assert after_first == names[2]
    assert Counter(job.tenant for job in second) == Counter([names[3], names[4], names[0]])
    assert after_second == names[0]  # where the walk, past the last tenant, stopped
    assert Counter(job.tenant for job in third) == Counter(names[1:4])


def test_a_lone_tenant_after_the_start_is_found_by_going_round(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    (alone,) = tenants(1)
    _enqueue(engine, kind, alone, 3)

    claimed = _claim(engine, kind, limit=1, after=alone)  # nothing after it: round to it

    assert [job.tenant for job in claimed] == [alone]
    assert next_after(claimed, 1, alone) == alone


def test_a_claim_walks_at_most_its_share_of_tenants(
    engine: Engine, kind: str, tenants: Callable[[int], list[str]]
) -> None:
    names = tenants(CLAIM_TENANTS + 2)
    for name in names:
        _enqueue(engine, kind, name, 1)

    claimed = _claim(engine, kind, limit=500)

    assert sorted(job.tenant for job in claimed) == names[:CLAIM_TENANTS]
    assert next_after(claimed, 500, "") == names[CLAIM_TENANTS - 1]


@pytest.mark.parametrize("after", [5, b"acme", "a\x00b", " ", "x" * 1000])
def test_a_walk_start_that_is_no_name_is_refused(engine: Engine, kind: str, after: object) -> None:
    with engine.begin() as conn, pytest.raises(ValidationError, match="after_tenant"):
        jobs.dequeue(conn, "w", kinds=[kind], after_tenant=after)  # type: ignore[arg-type]
