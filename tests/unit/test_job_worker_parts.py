"""The worker's parts whose logic needs neither threads nor a database.

The claim window's capacity formula, the claim book (claims by token: issue 10, bugs 1 and
3), the completer's batching, the printable error text, and supervision (with threads, but no
database: a part that raises is replaced and counted).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from dms.jobs import Job, JobState
from dms.jobs.settlement import _acked
from dms.jobs.worker._book import Claim, ClaimBook
from dms.jobs.worker._completer import take_batch
from dms.jobs.worker._settler import PRINTABLE_CHARS, printable_error
from dms.jobs.worker._supervisor import RUNNER, Supervisor
from dms.jobs.worker._wakeup import Wakeup
from dms.jobs.worker._window import claim_size, room_left
from dms.jobs.worker.stats import Tally

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _job(job_id: uuid.UUID | None = None, attempts: int = 1) -> Job:
    return Job(
        id=job_id or uuid.uuid4(),
        tenant="acme",
        kind="k",
        payload={},
        priority=0,
        state=JobState.RUNNING,
        attempts=attempts,
        max_attempts=25,
        run_at=NOW,
        locked_by="w",
        lease_expires_at=NOW,
        last_error=None,
        errors=(),
        backoff=None,
        idempotency_key=None,
        created_at=NOW,
        started_at=NOW,
        finished_at=None,
    )


def _book(runners: int = 2, prefetch: int = 0) -> ClaimBook:
    return ClaimBook(runners=runners, prefetch=prefetch, batch_size=100, now=0.0)


# --- the claim window ---------------------------------------------------------------------


def test_room_is_the_capacity_less_what_is_held_and_being_claimed() -> None:
    assert room_left(capacity=10, held=3, claiming=2, acking=0) == 5


def test_jobs_waiting_for_the_completer_need_no_runner_up_to_a_capacity_more() -> None:
    assert room_left(capacity=10, held=10, claiming=0, acking=4) == 4
    assert room_left(capacity=10, held=18, claiming=0, acking=18) == 2  # capped at 2x


def test_a_claim_waits_for_half_the_capacity_at_most_a_batch_at_least_one() -> None:
    assert claim_size(capacity=40, batch_size=500) == 20
    assert claim_size(capacity=4000, batch_size=500) == 500
    assert claim_size(capacity=1, batch_size=500) == 1


# --- the claim book -----------------------------------------------------------------------


def test_the_same_job_and_attempt_claimed_twice_are_two_claims() -> None:
    """Issue 10, bug 1: a release then a new claim of the same (job, attempt)."""
    book = _book()
    job = _job()
    (first,) = book.claimed([job], reserved=1)
    (second,) = book.claimed([job], reserved=1)
    assert first.token != second.token
    assert book.start(first)
    assert book.start(second)
    assert book.finish(first, deferred=False) is False  # the first copy is let go...
    assert book.holds(second)  # ...and the second is still held and running
    assert book.running_jobs() == (job,)
    assert book.finish(second, deferred=True) is True  # goes to the completer
    assert book.held() == 1


def test_finishing_a_claim_that_was_let_go_raises_nothing_and_defers_nothing() -> None:
    book = _book()
    (claim,) = book.claimed([_job()], reserved=1)
    book.start(claim)
    assert book.take_all() == [claim]  # a stop took it
    assert book.finish(claim, deferred=True) is False
    assert book.held() == 0


def test_a_claim_let_go_before_it_starts_is_not_started() -> None:
    book = _book()
    (claim,) = book.claimed([_job()], reserved=1)
    book.settled([claim])
    assert book.start(claim) is False


def test_claims_being_settled_are_not_renewed() -> None:
    book = _book()
    settling, other = book.claimed([_job(), _job()], reserved=2)
    book.settling([settling])
    assert book.due() == [other]


def test_a_lost_lease_of_a_claim_settled_meanwhile_is_no_reclaim() -> None:
    """Issue 10, bug 3: the heartbeat raced with this worker's own completion."""
    book = _book()
    completed, settling = book.claimed([_job(), _job()], reserved=2)
    book.settled([completed])
    book.settling([settling])
    assert book.lease_lost(completed) is False
    assert book.lease_lost(settling) is False


def test_a_lost_lease_of_a_held_claim_is_a_reclaim_and_stops_its_renewal() -> None:
    book = _book()
    (claim,) = book.claimed([_job()], reserved=1)
    book.start(claim)
    book.finish(claim, deferred=True)
    assert book.lease_lost(claim) is True
    assert book.due() == []
    book.settled([claim])  # the completer lets it go later: counted once
    assert book.held() == 0


def test_room_comes_back_as_claims_are_settled() -> None:
    stopping = threading.Event()
    book = _book(runners=2, prefetch=0)
    limit = book.reserve(stopping, timeout=0.01, now=0.0)
    assert limit == 2
    claims = book.claimed([_job(), _job()], reserved=limit)
    assert book.reserve(stopping, timeout=0.01, now=0.0) == 0  # full: no room came
    book.claimed([], reserved=0)
    book.settled(claims)
    assert book.reserve(stopping, timeout=0.01, now=0.0) == 2


def test_jobs_recorded_finished_wake_the_claimers_while_limits_exist() -> None:
    """Room under a tenant's limit that no notification announces (dms.jobs.limits)."""
    stopping = threading.Event()
    wakeup = Wakeup(stopping)
    book = ClaimBook(runners=3, prefetch=0, batch_size=100, now=0.0, on_free=wakeup.wake_if_limited)
    first, deferred, recorded = book.claimed([_job(), _job(), _job()], reserved=3)
    book.finish(first, deferred=False)  # no limits anywhere: nobody is woken
    unlimited = wakeup.generation
    wakeup.limited = True
    assert book.finish(deferred, deferred=True)  # still running in the database: no wake
    waiting = wakeup.generation
    book.settled([deferred])  # its completion is recorded
    completed = wakeup.generation
    book.finish(recorded, deferred=False)  # recorded in the handler's unit of work
    assert (unlimited, waiting, completed, wakeup.generation) == (0, 0, 1, 2)


def test_no_sweep_is_due_until_a_claim_fails_or_an_outcome_is_given_up() -> None:
    book = _book()
    (claim,) = book.claimed([_job()], reserved=0)
    book.settled([claim])
    assert book.begin_sweep(timeout=0.01) is None
    book.suspect()
    assert book.begin_sweep(timeout=0.01) == frozenset()
    book.end_sweep(clean=True)
    assert book.begin_sweep(timeout=0.01) is None  # done once
    (given_up,) = book.claimed([_job()], reserved=0)
    book.settled([given_up], lost_track=True)
    assert book.begin_sweep(timeout=0.01) == frozenset()  # not held: the sweep finds it


def test_a_sweep_keeps_what_is_held_and_is_due_again_if_it_failed() -> None:
    book = _book()
    held = _job()
    book.claimed([held], reserved=0)
    book.suspect()
    assert book.begin_sweep(timeout=0.01) == frozenset({held.id})
    book.end_sweep(clean=False)
    assert book.begin_sweep(timeout=0.01) == frozenset({held.id})


def test_a_sweep_waits_for_claims_in_flight_and_claims_wait_for_the_sweep() -> None:
    """A claim committed but not yet booked would be taken for lost."""
    stopping = threading.Event()
    book = _book(runners=4)
    reserved = book.reserve(stopping, timeout=0.01, now=0.0)
    book.suspect()
    assert book.begin_sweep(timeout=0.01) is None  # a claim is in flight
    book.claimed([], reserved=reserved)
    assert book.begin_sweep(timeout=0.01) == frozenset()
    assert book.reserve(stopping, timeout=0.01, now=0.0) == 0  # no claim during the sweep
    book.end_sweep(clean=True)
    assert book.reserve(stopping, timeout=0.01, now=0.0) > 0


def test_a_sweep_starts_as_soon_as_the_claim_in_flight_is_booked() -> None:
    stopping = threading.Event()
    book = _book(runners=4)
    reserved = book.reserve(stopping, timeout=0.01, now=0.0)
    book.suspect()
    job = _job()
    booking = threading.Timer(0.05, lambda: book.claimed([job], reserved=reserved))
    booking.start()
    assert book.begin_sweep(timeout=10) == frozenset({job.id})
    booking.join()


# --- the completer's batching -------------------------------------------------------------


def _feed(claims: list[Claim]) -> Iterator[Claim | None]:
    yield from claims
    while True:
        yield None


def test_a_batch_takes_what_waits_up_to_its_limit() -> None:
    claims = [Claim(_job(), token) for token in range(5)]
    rest = _feed(claims[1:])
    batch, carried = take_batch(claims[0], lambda: next(rest), limit=3)
    assert (batch, carried) == (claims[:3], None)


def test_the_completion_document_holds_each_fence_as_json_would_write_it() -> None:
    batch = [_job(attempts=n) for n in (1, 7, 25)]
    batch.append(dataclasses.replace(_job(), locked_by='host:1:"w"\\\u00e9\u2028'))
    assert json.loads(_acked(batch)) == [
        {"position": n, "id": job.id.hex, "locked_by": job.locked_by, "attempts": job.attempts}
        for n, job in enumerate(batch, 1)
    ]


def test_a_second_claim_of_a_job_in_the_batch_waits_for_the_next_batch() -> None:
    job = _job()
    first, other, again = Claim(job, 1), Claim(_job(), 2), Claim(job, 3)
    rest = _feed([other, again])
    batch, carried = take_batch(first, lambda: next(rest), limit=10)
    assert (batch, carried) == ([first, other], again)


# --- error text ---------------------------------------------------------------------------


def test_printable_error_escapes_what_postgresql_cannot_store() -> None:
    name = b"scan-\xff.pdf".decode("utf-8", "surrogateescape")
    text = printable_error(ValueError(f"cannot read {name}\x00 ünïcode"))
    text.encode("utf-8")  # would raise for a lone surrogate
    assert "\x00" not in text
    assert "ValueError: cannot read scan-\\udcff.pdf\\x00 \\xfcn\\xefcode" in text


def test_printable_error_keeps_the_end_of_a_huge_text() -> None:
    text = printable_error(RuntimeError("x" * 100_000 + "the end"))
    assert len(text) <= PRINTABLE_CHARS + len("\n[...cut] ")
    assert text.startswith("RuntimeError: xxx")
    assert "\n[...cut] " in text
    assert text.endswith("the end")


def test_printable_error_names_the_error_it_failed_to_record_first() -> None:
    failure = UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")
    failure.__context__ = ValueError("document is locked")  # raised while recording it
    assert printable_error(failure).splitlines()[0] == (
        "UnicodeEncodeError: 'utf-8' codec can't encode character '\\udcff' in position 0: "
        "surrogates not allowed <- ValueError: document is locked"
    )


# --- supervision --------------------------------------------------------------------------


class _Flaky:
    """A part that raises on its first runs, then waits for the stop."""

    def __init__(self, failures: Iterator[int], stopping: threading.Event) -> None:
        self._failures = failures
        self._stopping = stopping
        self.salvaged: list[BaseException] = []

    def run(self) -> None:
        if next(self._failures) < 2:
            raise SystemExit("a handler called sys.exit()")  # not even an Exception
        self._stopping.wait()

    def salvage(self, error: BaseException) -> None:
        self.salvaged.append(error)


def test_a_runner_that_fails_is_replaced_counted_and_salvaged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopping = threading.Event()
    tally = Tally(runners=1)
    supervisor = Supervisor(name="w", tally=tally, stopping=stopping)
    failures = itertools.count()
    parts: list[_Flaky] = []

    def make() -> _Flaky:
        parts.append(_Flaky(failures, stopping))
        return parts[-1]

    supervisor.start(RUNNER, make)
    give_up = time.monotonic() + 30  # a supervisor that stops replacing fails, not hangs
    while len(parts) < 3 and time.monotonic() < give_up:
        time.sleep(0.01)
    stats = tally.snapshot(held=0)
    assert (stats.runners_replaced, stats.runners_alive) == (2, 1)
    assert [len(part.salvaged) for part in parts] == [1, 1, 0]
    assert "a handler called sys.exit()" in caplog.text  # with its traceback
    assert "Traceback" in caplog.text
    stopping.set()
    assert supervisor.join(timeout=5)
    assert tally.snapshot(held=0).runners_alive == 0


def test_no_part_is_replaced_once_the_worker_stops() -> None:
    stopping = threading.Event()
    stopping.set()
    tally = Tally(runners=1)
    supervisor = Supervisor(name="w", tally=tally, stopping=stopping)
    supervisor.start("claimer", lambda: _Flaky(itertools.count(), stopping))
    assert supervisor.join(timeout=5)
    assert len(supervisor.threads()) == 1
    assert tally.snapshot(held=0).parts_restarted == 1
