"""Faults injected from outside under running workers (issue 10): none loses or repeats a job.

(a) ``pg_terminate_backend`` on random connections of an in-process worker every 200 ms;
(b) the server restarted, fast then immediate, under a running worker, on a private server
the test starts itself (never the shared one); (c) SIGKILL on random worker processes with
one-second leases. Each test then checks every job's effect (a row written in the handler's
unit of work) exactly once, none lost, none stuck ``running``, no runner lost (the workers'
own stats), and that the worker still processes jobs afterwards; the tenant is limited to
:data:`LIMIT` jobs running at once, and no sample of the running jobs taken every 10 ms under
the faults ever sees more; (b) and (c) also tick a schedule of every minute under the faults
(a week of ticks due, enqueued a thousand a pass), and check that every tick was enqueued
once; (a) and (c) have another tenant enqueue a job every 0.3 s behind the first one's
backlog, each run exactly once too, and check that the queue stayed fair: their median wait
below the backlog's (first in, first out, each would wait for all of it). Each prints one line
of figures (``FAULTS ...``), the record of the issue's closing note. Bounded in time; no timing
is asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine

from dms import jobs, migrations, provisioning, tenancy
from dms.jobs.schedules import MAX_CATCH_UP
from dms.jobs.tables import job_schedules, processing_jobs
from dms.jobs.worker import AsyncTenantTransaction, JobUnitOfWork, TenantTransaction
from dms.users import create_users_stand_in
from tests.conftest import LONG_TEST_SECONDS
from tests.jobs import child_worker
from tests.jobs.conftest import effects_metadata, job_effects
from tests.migrations.private_server import private_server

#: Their bounded waits (a storm, then SETTLE_SECONDS more than once) may add up to more than the
#: suite's default timeout before they fail with their own message.
pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.timeout(LONG_TEST_SECONDS)]

REPO = Path(__file__).resolve().parents[2]
#: Seconds a test waits for its jobs once the faults stop, while none of them finishes: a
#: stall, not slowness, fails it (a busy CI machine gives a one-thread event loop a small share
#: of the cores); the test's own timeout bounds the whole.
SETTLE_SECONDS = 60.0
#: Seconds a handler takes after writing its effect, so that faults land mid-job.
HANDLER_SECONDS = 0.003
#: Seconds the SIGKILL storm lasts at least, however soon its jobs are done.
MIN_STORM_SECONDS = 8.0
#: The schedule's tick (a cron expression's finest: a minute).
TICK = timedelta(minutes=1)
#: A short lease, so that a job whose worker died is taken over within seconds.
LEASE = timedelta(seconds=2)
#: The most jobs of the test's tenant running at once: fewer than the workers' runners and
#: claims ahead, so that the limit is what holds them back, faults or not (and not so few that
#: claims of a few jobs each make the tests slow: 3 cost CI a minute).
LIMIT = 8


@dataclass(frozen=True)
class Outcome:
    """What a fault test measured."""

    jobs: int
    duplicates: int
    lost: int
    stuck: int
    runners_lost: int

    def report(self, name: str, **more: object) -> None:
        """Print the figures on one line, for the record."""
        extra = "".join(f" {key}={value}" for key, value in more.items())
        print(
            f"\nFAULTS {name}: jobs={self.jobs} duplicates={self.duplicates} lost={self.lost} "
            f"stuck={self.stuck} runners_lost={self.runners_lost}{extra}"
        )


def _write_effect(uow: JobUnitOfWork, job: jobs.Job) -> None:
    uow.connection.execute(
        sa.insert(job_effects).values(job_id=job.id, attempt=job.attempts, worker="w")
    )


def _handler(uow: JobUnitOfWork, job: jobs.Job) -> None:
    _write_effect(uow, job)
    time.sleep(HANDLER_SECONDS)


async def _async_handler(uow: AsyncTenantTransaction[TenantTransaction], job: jobs.Job) -> None:
    await uow.run(_write_effect, job)
    await asyncio.sleep(HANDLER_SECONDS)


#: The handler of each style (tests/jobs/conftest.py): the faults hold for both.
HANDLERS: dict[str, Any] = {"thread": _handler, "asyncio": _async_handler}


def _enqueue(engine: Engine, kind: str, tenant: str, count: int) -> list[uuid.UUID]:
    # max_attempts well above what the faults can cost a job: each kill may count an attempt.
    batch = [
        jobs.NewJob(kind=kind, payload={"n": n}, tenant=tenant, max_attempts=1000)
        for n in range(count)
    ]
    with engine.begin() as conn:
        return [result.job_id for result in jobs.enqueue_many(conn, batch)]


def _unfinished(engine: Engine, kind: str) -> int:
    query = sa.select(sa.func.count()).where(
        processing_jobs.c.kind == kind, processing_jobs.c.state != jobs.JobState.DONE.value
    )
    with engine.connect() as conn:
        return int(conn.scalar(query) or 0)


def _outcome(
    engine: Engine, tenant: str, kind: str, ids: list[uuid.UUID], runners_lost: int
) -> Outcome:
    with engine.connect() as conn:
        rows = tenancy.route(conn, tenant).execute(
            sa.select(job_effects.c.job_id, sa.func.count()).group_by(job_effects.c.job_id)
        )
        counts: dict[uuid.UUID, int] = {job_id: count for job_id, count in rows}
        stuck = conn.scalar(
            sa.select(sa.func.count()).where(
                processing_jobs.c.kind == kind,
                processing_jobs.c.state == jobs.JobState.RUNNING.value,
            )
        )
    return Outcome(
        jobs=len(ids),
        duplicates=sum(max(0, counts.get(job_id, 0) - 1) for job_id in ids),
        lost=sum(1 for job_id in ids if counts.get(job_id, 0) == 0),
        stuck=int(stuck or 0),
        runners_lost=runners_lost,
    )


def _assert_exactly_once(outcome: Outcome) -> None:
    assert (outcome.duplicates, outcome.lost, outcome.stuck, outcome.runners_lost) == (0, 0, 0, 0)


@contextlib.contextmanager
def _ticking(engine: Engine, tenant: str, kind: str) -> Iterator[list[datetime]]:
    """A schedule of every minute, ticked by the workers under the faults; unscheduled at the
    end, when the list it gives holds the ticks enqueued (the jobs' ``run_at``), in order.

    Its ticks of the last week are due at once (the longest catch-up window): 10,080 of them,
    which the workers' passes enqueue :data:`~dms.jobs.schedules.MAX_TICKS_PER_PASS` at a time,
    about a pass a second, for as long as a storm lasts. No worker handles ``kind.tick``: its
    jobs stay queued, one per tick enqueued.
    """
    schedule = jobs.Schedule(
        name=f"faults-{uuid.uuid4().hex[:8]}",
        cron="* * * * *",
        kind=f"{kind}.tick",
        tenant=tenant,
        catch_up=MAX_CATCH_UP,
    )
    with engine.begin() as conn:
        jobs.register_schedules(conn, [schedule])
        conn.execute(
            sa.update(job_schedules)
            .where(job_schedules.c.name == schedule.name)
            .values(next_run_at=job_schedules.c.next_run_at - MAX_CATCH_UP + TICK)
        )
    ticks: list[datetime] = []
    try:
        yield ticks
    finally:
        with engine.begin() as conn:
            jobs.remove_schedule(conn, schedule.name)
            ticks.extend(
                conn.scalars(
                    sa.select(processing_jobs.c.run_at)
                    .where(processing_jobs.c.kind == schedule.kind)
                    .order_by(processing_jobs.c.run_at)
                )
            )


@contextlib.contextmanager
def _limited(engine: Engine, tenant: str, max_running: int) -> Iterator[list[int]]:
    """``tenant`` limited to ``max_running`` jobs at once while the faults last; the list it
    gives holds the running counts seen, sampled every 10 ms by a connection of its own (the
    server may be down a while: those samples are missed, not failed)."""
    with engine.begin() as conn:
        jobs.set_limit(conn, jobs.Limit(tenant=tenant, max_running=max_running))
    running = sa.select(sa.func.count()).where(
        processing_jobs.c.tenant == tenant, processing_jobs.c.state == jobs.JobState.RUNNING.value
    )
    seen: list[int] = []

    def sample() -> int:
        with engine.connect() as conn:
            seen.append(int(conn.scalar(running) or 0))
        return 0

    try:
        with Storm(sample, every=0.01):
            yield seen
    finally:
        with engine.begin() as conn:
            jobs.remove_limit(conn, tenant)


def _assert_limit_kept(seen: list[int], max_running: int) -> None:
    """Never more than the limit ran, and the limit was reached: it was what held them."""
    assert len(seen) > 10
    assert max(seen) <= max_running
    assert max(seen) == max_running


def _assert_every_tick_once(ticks: list[datetime], *, at_least: int) -> None:
    """Every minute from the first tick to the last enqueued once: none lost, none doubled."""
    gaps = [(a, b) for a, b in itertools.pairwise(ticks) if b - a != TICK]
    assert len(ticks) >= at_least
    assert gaps == []


@contextlib.contextmanager
def _trickle(engine: Engine, tenant: str, kind: str) -> Iterator[list[uuid.UUID]]:
    """Another tenant enqueues a job of ``kind`` every 0.3 s while the faults last, behind the
    first tenant's backlog; the list it gives holds their ids."""
    with engine.begin() as conn:
        effects_metadata.create_all(tenancy.route(conn, tenant))
    ids: list[uuid.UUID] = []

    def enqueue() -> int:
        ids.extend(_enqueue(engine, kind, tenant, 1))
        return 1

    with Storm(enqueue, every=0.3):
        yield ids


def _waits(engine: Engine, ids: list[uuid.UUID]) -> list[float]:
    """Seconds from enqueue to start of each job of ``ids``."""
    waited = sa.extract("epoch", processing_jobs.c.started_at - processing_jobs.c.created_at)
    with engine.connect() as conn:
        return [
            float(w) for w in conn.scalars(sa.select(waited).where(processing_jobs.c.id.in_(ids)))
        ]


def _assert_fair(engine: Engine, backlog: list[uuid.UUID], trickled: list[uuid.UUID]) -> None:
    """The trickled jobs did not queue behind the backlog: their median wait is below the
    backlog's (in a first-in-first-out queue, every one of them waits for all of it)."""
    assert len(trickled) >= 3
    assert statistics.median(_waits(engine, trickled)) < statistics.median(_waits(engine, backlog))


def _drained(engine: Engine, kind: str, *, below: int = 1) -> None:
    """Wait until fewer than ``below`` jobs of ``kind`` are unfinished; fail if they stop
    finishing for :data:`SETTLE_SECONDS`."""
    left = _unfinished(engine, kind)
    progressed = time.monotonic()
    while left >= below:
        if time.monotonic() - progressed > SETTLE_SECONDS:
            pytest.fail(f"{left} jobs of {kind} unfinished, none finished in {SETTLE_SECONDS}s")
        time.sleep(0.1)
        now = _unfinished(engine, kind)
        if now < left:
            left, progressed = now, time.monotonic()


def _still_works(engine: Engine, kind: str, tenant: str) -> None:
    """Jobs enqueued after the faults are processed too."""
    _enqueue(engine, kind, tenant, 20)
    _drained(engine, kind)


@dataclass
class Storm:
    """Something done every ``every`` seconds in a thread until stopped; counts its blows."""

    blow: Callable[[], int]
    every: float
    blows: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            # The server may be restarting: the next blow tries again.
            with contextlib.suppress(sa.exc.DBAPIError):
                self.blows += self.blow()

    def __enter__(self) -> Storm:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# --- (a) pg_terminate_backend -------------------------------------------------------------


def _terminator(engine: Engine, application_name: str) -> Callable[[], int]:
    """Terminate each connection of ``application_name`` with probability one half."""
    activity = sa.table("pg_stat_activity", sa.column("pid"), sa.column("application_name"))

    def blow() -> int:
        with engine.connect() as conn:
            pids = conn.scalars(
                sa.select(activity.c.pid).where(
                    activity.c.application_name == application_name,
                    activity.c.pid != sa.func.pg_backend_pid(),
                )
            ).all()
            chosen = [pid for pid in pids if random.random() < 0.5]
            for pid in chosen:
                conn.execute(sa.select(sa.func.pg_terminate_backend(pid)))
            return len(chosen)

    return blow


def test_terminated_connections_lose_and_repeat_no_job(  # noqa: PLR0917 - fixtures
    engine: Engine,
    effects: str,
    other_tenant: str,
    kind: str,
    fresh_engine: Callable[..., Engine],
    handler_style: str,
) -> None:
    name = f"faults-{uuid.uuid4().hex[:8]}"
    worker_engine = fresh_engine(name, pool_pre_ping=True)
    ids = _enqueue(engine, kind, effects, 3000)
    worker = jobs.Worker(
        worker_engine,
        {kind: HANDLERS[handler_style]},
        jobs.WorkerConfig(concurrency=4, lease=LEASE, poll_seconds=0.2),
    )
    with _limited(engine, effects, LIMIT) as running, worker:
        with (
            Storm(_terminator(engine, name), every=0.2) as storm,
            _trickle(engine, other_tenant, kind) as trickled,
        ):
            deadline = time.monotonic() + 20
            while _unfinished(engine, kind) and time.monotonic() < deadline:
                time.sleep(0.2)
        _drained(engine, kind)
        _still_works(engine, kind, effects)
        stats = worker.stats()
    outcome = _outcome(engine, effects, kind, ids, stats.runners - stats.runners_alive)
    outcome.report(
        f"pg_terminate_backend ({handler_style} handlers)",
        terminated=storm.blows,
        replaced=stats.runners_replaced,
        most_running=f"{max(running)}/{LIMIT}",
    )
    assert storm.blows > 0
    _assert_exactly_once(outcome)
    _assert_exactly_once(_outcome(engine, other_tenant, kind, trickled, 0))
    _assert_limit_kept(running, LIMIT)
    _assert_fair(engine, ids, trickled)


# --- (b) server restarts --------------------------------------------------------------------


@pytest.fixture
def private_database() -> Iterator[tuple[Engine, Callable[[str], None]]]:
    """A migrated database on a private server, and a function that restarts the server."""
    with private_server() as server:
        engine = sa.create_engine(server.url, pool_pre_ping=True)
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        try:
            yield engine, server.restart
        finally:
            engine.dispose()


def test_server_restarts_lose_and_repeat_no_job(
    private_database: tuple[Engine, Callable[[str], None]], handler_style: str
) -> None:
    engine, restart = private_database
    tenant, kind = f"t{uuid.uuid4().hex[:8]}", "faults.restart"
    provisioning.create_tenant(engine, tenant)
    with engine.begin() as conn:
        effects_metadata.create_all(tenancy.route(conn, tenant))
    ids = _enqueue(engine, kind, tenant, 2000)
    worker = jobs.Worker(
        engine,
        {kind: HANDLERS[handler_style]},
        jobs.WorkerConfig(concurrency=4, lease=LEASE, poll_seconds=0.2),
    )
    with (
        _ticking(engine, tenant, kind) as ticks,
        _limited(engine, tenant, LIMIT) as running,
        worker,
    ):
        _drained(engine, kind, below=1800)
        restart("fast")
        _drained(engine, kind, below=1000)
        restart("immediate")
        _drained(engine, kind)
        _still_works(engine, kind, tenant)
        stats = worker.stats()
    outcome = _outcome(engine, tenant, kind, ids, stats.runners - stats.runners_alive)
    outcome.report(
        f"server restart (fast, immediate; {handler_style} handlers)",
        replaced=stats.runners_replaced,
        ticks=len(ticks),
        most_running=f"{max(running)}/{LIMIT}",
    )
    _assert_exactly_once(outcome)
    _assert_every_tick_once(ticks, at_least=2)
    _assert_limit_kept(running, LIMIT)


# --- (c) SIGKILL ----------------------------------------------------------------------------


def _child(url: URL, kind: str) -> subprocess.Popen[str]:
    """A worker process of the ``effects`` mode, returned once it can take a SIGTERM."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.jobs.child_worker",
            "effects",
            url.render_as_string(hide_password=False),
            kind,
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    ready = child.stdout.readline().strip()
    if ready != child_worker.READY:
        child.kill()
        child.communicate()
        pytest.fail(f"a worker process did not start: it printed {ready!r}")
    return child


def _stats_at_stop(children: list[subprocess.Popen[str]]) -> list[dict[str, int]]:
    """Stop every child (all signalled first, so that one that fails leaves none running)."""
    for child in children:
        child.send_signal(signal.SIGTERM)
    outputs = []
    for child in children:
        try:
            out, _ = child.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            for straggler in children:
                straggler.kill()
            raise
        outputs.append(out)
    return [json.loads(out.strip().splitlines()[-1]) for out in outputs]


def _kill_storm(
    engine: Engine,
    kind: str,
    tenant: str,
    trickled: Callable[[], contextlib.AbstractContextManager[object]],
) -> tuple[int, int]:
    """Three worker processes, one SIGKILLed and replaced every 0.5 to 1.5 s, for at least
    :data:`MIN_STORM_SECONDS` (the schedule's ticks) and until the jobs are done or 20 s have
    passed, ``trickled()`` lasting as long; then the jobs left are waited for. The number of
    kills and of runners lost."""
    children: list[subprocess.Popen[str]] = []
    kills = 0
    try:
        children.extend(_child(engine.url, kind) for _ in range(3))
        started = time.monotonic()
        with trickled():
            while time.monotonic() - started < 20 and (
                _unfinished(engine, kind) or time.monotonic() - started < MIN_STORM_SECONDS
            ):
                time.sleep(random.uniform(0.5, 1.5))
                victim = children.pop(random.randrange(len(children)))
                victim.kill()
                victim.communicate(timeout=30)  # reaps it and closes its pipe
                kills += 1
                children.append(_child(engine.url, kind))
        _drained(engine, kind)
        _still_works(engine, kind, tenant)
    finally:
        survivors = _stats_at_stop(children)
    return kills, sum(s["runners"] - s["runners_alive"] for s in survivors)


def test_killed_worker_processes_lose_and_repeat_no_job(
    engine: Engine, effects: str, other_tenant: str, kind: str
) -> None:
    ids = _enqueue(engine, kind, effects, 2000)
    trickled: list[uuid.UUID] = []

    @contextlib.contextmanager
    def trickling() -> Iterator[None]:
        with _trickle(engine, other_tenant, kind) as enqueued:
            yield
        trickled.extend(enqueued)

    with _ticking(engine, effects, kind) as ticks, _limited(engine, effects, LIMIT) as running:
        kills, runners_lost = _kill_storm(engine, kind, effects, trickling)
    outcome = _outcome(engine, effects, kind, ids, runners_lost)
    outcome.report(
        "SIGKILL",
        kills=kills,
        processes=3,
        ticks=len(ticks),
        most_running=f"{max(running)}/{LIMIT}",
    )
    assert kills > 0
    _assert_exactly_once(outcome)
    _assert_exactly_once(_outcome(engine, other_tenant, kind, trickled, 0))
    _assert_every_tick_once(ticks, at_least=5)
    _assert_limit_kept(running, LIMIT)
    _assert_fair(engine, ids, trickled)
