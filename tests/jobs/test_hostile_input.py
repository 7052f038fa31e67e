"""Hostile input at every public entry point of dms.jobs: stored intact, or refused unchanged.

For each entry point (enqueue, enqueue_many, NewJob, Backoff, dequeue, claim_batch, complete,
complete_many, fail, heartbeat, release, requeue, the dead letter, get, stats, prune, reclaim,
cancel, cancel_matching, list_jobs), hypothesis draws values a careless or hostile caller could
pass: any text (NUL, lone surrogates, every Unicode category, lengths around the caps), JSON that
``jsonb`` would change or refuse, timestamps with any offset, durations up to ``timedelta.max``,
and values of the wrong type. Each call must end in one of two ways:

* it returns, and what it stored reads back equal to what was given (*accepted intact*);
* it raises a :class:`~dms.errors.DmsError` of the kinds the entry point may raise
  (*refused*): a :class:`~dms.errors.ValidationError` (or an invalid tenant name) before any
  statement was sent, and whatever the refusal, the queue's tables are unchanged.

Any other exception (a raw psycopg or Python error) fails the test. Examples are derandomized
and every one runs in a transaction that is rolled back, so each starts from the same world.
``pytest -p no:xdist tests/jobs/test_hostile_input.py`` prints, per entry point, how many
inputs were tried, accepted intact and refused.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, NoReturn

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event as sa_event
from sqlalchemy.engine import Connection, Engine

from dms import jobs, provisioning
from dms.errors import (
    DmsError,
    InvalidTenantName,
    LeaseLost,
    NotFound,
    TenantNotFound,
    ValidationError,
)
from dms.jobs._failures import error_text
from dms.jobs.backoff import MAX_BACKOFF_SECONDS
from dms.jobs.enqueue import DEFAULT_MAX_ATTEMPTS
from dms.jobs.tables import job_idempotency_keys, job_limits, job_schedules, processing_jobs
from dms.jobs.validation import (
    MAX_KEY_RETENTION,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_CHARS,
    MAX_PAYLOAD_DEPTH,
)
from tests.conftest import new_slug
from tests.hostile import NOT_TEXT, Tally, checksums, texts

#: Examples per entry point: about 50 entry points, each example one rolled-back transaction
#: (about 30 s for the module on two shared cores).
EXAMPLES = 40

# --- values -----------------------------------------------------------------------------------

TEXT = texts([MAX_NAME_CHARS - 1, MAX_NAME_CHARS, MAX_NAME_CHARS + 1, 5000])
ANYTHING = st.one_of(TEXT, NOT_TEXT)
IDS = st.one_of(st.uuids(), st.uuids().map(str), ANYTHING)
DURATIONS = st.one_of(
    st.timedeltas(),
    st.sampled_from([timedelta(0), timedelta.max, timedelta.min, MAX_KEY_RETENTION]),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400)),
    ANYTHING,
)
#: Aware datetimes with any offset Python allows (PostgreSQL's stop at ±15:59), naive ones,
#: and the ends of the range.
OFFSETS = st.timedeltas(
    min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
).map(timezone)
MOMENTS = st.one_of(
    st.datetimes(timezones=OFFSETS),
    st.datetimes(timezones=st.timezones()),
    st.sampled_from(
        [
            datetime.max.replace(tzinfo=timezone(-timedelta(hours=23))),
            datetime.min.replace(tzinfo=timezone(timedelta(hours=23))),
            datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=16))),
        ]
    ),
    st.datetimes(),
    ANYTHING,
)
JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), TEXT, st.sampled_from([1e16, 1e23])
)
JSON = st.recursive(
    JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(TEXT, children, max_size=3),
        st.tuples(children),
        st.dictionaries(st.one_of(st.integers(), st.booleans()), children, max_size=2),
    ),
    max_leaves=8,
)


def nested(depth: int) -> object:
    """A payload ``depth`` arrays deep, built without recursion."""
    value: object = "bottom"
    for _ in range(depth):
        value = [value]
    return value


PAYLOADS = st.one_of(
    JSON,
    st.dictionaries(TEXT, JSON, max_size=3),
    st.sampled_from([MAX_PAYLOAD_DEPTH - 1, MAX_PAYLOAD_DEPTH, MAX_PAYLOAD_DEPTH + 1, 5000]).map(
        nested
    ),
    st.sampled_from([MAX_PAYLOAD_CHARS - 2, MAX_PAYLOAD_CHARS - 1]).map(lambda n: "p" * n),
    st.just({"text": "\\u0000"}),
    NOT_TEXT,
)
SECONDS = st.one_of(
    st.floats(),
    st.integers(),
    st.sampled_from([0, MAX_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS + 1, 1e15, 10**400]),
    ANYTHING,
)


def _raise(error: Exception) -> NoReturn:
    raise error


def _raised(error: Exception) -> BaseException:
    """``error`` with a traceback, as a handler's exception arrives at ``fail``."""
    try:
        _raise(error)
    except Exception as exc:  # caught to be recorded, as the Worker does
        return exc


ERRORS = st.one_of(
    TEXT,
    st.sampled_from([1_000, 10_000, 2_000_000]).map(lambda n: "e" * n),
    TEXT.map(lambda text: _raised(OSError(text))),
    ANYTHING,
)
FLAGS = st.one_of(st.booleans(), st.booleans(), ANYTHING)
COUNTS = st.one_of(st.integers(-1, 3), st.sampled_from([2**31 - 1, 2**31, 2**63]), ANYTHING)

# --- the world every example starts from ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class World:
    """Committed jobs of a tenant of its own: one queued, one running, one dead."""

    tenant: str
    kind: str
    queued: jobs.Job
    running: jobs.Job
    dead: jobs.Job
    snapshot: tuple[tuple[Any, ...], ...] = ()


def snapshot(conn: Connection) -> tuple[tuple[Any, ...], ...]:
    """Row count and checksum of the queue's tables."""
    return checksums(conn, (processing_jobs, job_idempotency_keys, job_schedules, job_limits))


def _claimed(conn: Connection, tenant: str, kind: str, **options: Any) -> jobs.Job:
    jobs.enqueue(conn, kind, {"world": kind}, tenant=tenant, **options)
    (job,) = jobs.dequeue(conn, "world-worker", kinds=[kind], lease=timedelta(hours=1))
    return job


@pytest.fixture(scope="module")
def world(engine: Engine) -> Iterator[World]:
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    kind = f"hostile.{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        queued = jobs.enqueue(conn, kind, {"world": "queued"}, tenant=slug).job_id
        running = _claimed(conn, slug, f"{kind}.running")
        dead = jobs.fail(
            conn, _claimed(conn, slug, f"{kind}.dead", max_attempts=1), "dead on arrival"
        )
    with engine.connect() as conn:
        state = snapshot(conn)
        queued_job = jobs.get(conn, queued)
    yield World(
        tenant=slug, kind=kind, queued=queued_job, running=running, dead=dead, snapshot=state
    )
    provisioning.drop_tenant(engine, slug)


# --- what an example checks -------------------------------------------------------------------

#: A call of an entry point with a drawn value; its result goes to the read back.
Call = Callable[[Connection, World, Any], object]
#: Reads back what a call stored: (what was stored, what it should equal).
ReadBack = Callable[[Connection, World, Any, Any], tuple[object, object]]
#: Refusals that happen before any SQL.
BEFORE_SQL = (ValidationError, InvalidTenantName)


def returned(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    """For lookups: having returned is the whole success."""
    return None, None


@dataclass(frozen=True)
class EntryPoint:
    """An entry point, the values to try on it, and how to read back what it stored."""

    name: str
    values: st.SearchStrategy[Any] | Callable[[World], st.SearchStrategy[Any]]
    call: Call
    read_back: ReadBack = returned
    refusals: tuple[type[DmsError], ...] = BEFORE_SQL


TALLY = Tally("dms.jobs hostile input")
outcome = TALLY.outcome


@pytest.fixture(scope="module", autouse=True)
def figures(request: pytest.FixtureRequest) -> Iterator[None]:
    """At the end of the module, print what was tried, accepted intact and refused."""
    yield from TALLY.report_after(request)


@contextmanager
def statements_sent(conn: Connection) -> Iterator[list[str]]:
    """The statements sent on ``conn`` in the block."""
    sent: list[str] = []

    def record(*arguments: Any) -> None:
        sent.append(arguments[2])

    sa_event.listen(conn, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa_event.remove(conn, "before_cursor_execute", record)


def run(
    engine: Engine, world: World, entry: EntryPoint, value: Any, *, expect: str | None = None
) -> None:
    """Call ``entry`` with ``value`` in a transaction that is rolled back; check the outcome.

    ``expect``: ``"refused"`` (before any SQL) or ``"accepted"`` for a value known to be either.
    """
    with engine.connect() as conn:
        try:
            with statements_sent(conn) as sent:
                result = entry.call(conn, world, value)
        except DmsError as refusal:
            allowed = BEFORE_SQL if expect == "refused" else entry.refusals
            if expect == "accepted" or not isinstance(refusal, allowed):
                pytest.fail(f"{entry.name} refused {value!r:.200} with {refusal!r:.300}")
            if isinstance(refusal, BEFORE_SQL):
                assert sent == [], f"{entry.name}: SQL ran before the refusal"
            assert snapshot(conn) == world.snapshot
            outcome(entry.name, f"refused ({type(refusal).__name__})")
            return
        assert expect != "refused", f"{entry.name} accepted {value!r:.200}"
        stored, expected = entry.read_back(conn, world, value, result)
        assert stored == expected
        outcome(entry.name, "accepted intact")


# --- the entry points -------------------------------------------------------------------------


def _enqueued(field: str, **fixed: Any) -> tuple[Call, ReadBack]:
    """``enqueue`` with ``field`` drawn, reading back that field of the stored job."""

    def call(conn: Connection, world: World, value: Any) -> object:
        arguments: dict[str, Any] = {"kind": world.kind, "payload": {}, "tenant": world.tenant}
        arguments.update(fixed)
        arguments[field] = value
        kind, payload = arguments.pop("kind"), arguments.pop("payload")
        return jobs.enqueue(conn, kind, payload, **arguments)

    def read_back(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
        stored = getattr(jobs.get(conn, result.job_id), field)
        if value is None and field in {"max_attempts", "run_at"}:  # None asks for the default
            now = conn.execute(sa.select(sa.func.now())).scalar_one()
            return stored, {"max_attempts": DEFAULT_MAX_ATTEMPTS, "run_at": now}[field]
        if isinstance(value, datetime):
            # In UTC: Python never finds times in a fold or gap equal across zones (PEP 495).
            return stored.astimezone(timezone.utc), value.astimezone(timezone.utc)
        return stored, value

    return call, read_back


def _backoff(part: str) -> tuple[Call, ReadBack]:
    """A ``Backoff`` with ``part`` drawn, enqueued with a job; it must also compute delays."""

    def call(conn: Connection, world: World, value: Any) -> object:
        others = {"initial_seconds": 0, "step_seconds": 0, "maximum_seconds": MAX_BACKOFF_SECONDS}
        policy = jobs.Backoff(**{**others, part: value})
        policy.delay(2**31 - 1)  # the worker's computation for the last possible attempt
        return policy, jobs.enqueue(conn, world.kind, {}, tenant=world.tenant, backoff=policy)

    def read_back(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
        policy, enqueued = result
        return jobs.get(conn, enqueued.job_id).backoff, policy

    return call, read_back


def _key_retention(
    conn: Connection, world: World, value: Any, result: Any
) -> tuple[object, object]:
    kept = sa.select(job_idempotency_keys.c.expires_at - sa.func.now()).where(
        job_idempotency_keys.c.job_id == result.job_id
    )
    return conn.scalar(kept), value


NEW_JOB_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "kind": TEXT,
        "payload": PAYLOADS,
        "tenant": ANYTHING,
        "idempotency_key": st.one_of(st.none(), TEXT),
        "run_at": st.one_of(st.none(), MOMENTS),
        "priority": COUNTS,
        "max_attempts": COUNTS,
        "backoff": st.one_of(st.none(), st.just(jobs.Backoff()), ANYTHING),
    },
)


def _new_job(conn: Connection, world: World, value: Any) -> object:
    fields = {"kind": world.kind, "payload": {}, "tenant": world.tenant, **value}
    new = jobs.NewJob(**fields)
    return new, jobs.enqueue_many(conn, [new])


def _new_job_read(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    new, (enqueued,) = result
    stored = jobs.get(conn, enqueued.job_id)
    names = ["kind", "payload", "tenant", "idempotency_key", "priority", "max_attempts", "backoff"]
    expected = [getattr(new, name) for name in names]
    got = [getattr(stored, name) for name in names]
    if new.run_at is not None:
        got.append(stored.run_at.astimezone(timezone.utc))
        expected.append(new.run_at.astimezone(timezone.utc))
    return got, expected


SCHEDULE_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "name": TEXT,
    "cron": st.one_of(
        st.sampled_from(
            ["* * * * *", "*/5 * * * * *", "@hourly", "0 9 * * 1-5", "0 0 31 2 *", "61 * * * *"]
        ),
        st.lists(
            st.sampled_from(["*", "*/7", "0", "1-5", "L", "#", "?", "99", "-1", "W"]),
            min_size=1,
            max_size=7,
        ).map(" ".join),
        ANYTHING,
    ),
    "timezone": st.one_of(
        st.sampled_from(["UTC", "Europe/Berlin", "Asia/Kolkata", "America/St_Johns"]), ANYTHING
    ),
    "catch_up": DURATIONS,
}


def _scheduled(field: str) -> tuple[Call, ReadBack]:
    """A schedule with ``field`` drawn, registered; reads back that field of the stored one."""

    def call(conn: Connection, world: World, value: Any) -> object:
        fields: dict[str, Any] = {
            "name": f"hostile-{uuid.uuid4().hex}",
            "cron": "* * * * *",
            "kind": world.kind,
            "tenant": world.tenant,
            field: value,
        }
        schedule = jobs.Schedule(**fields)
        jobs.register_schedules(conn, [schedule])
        return schedule

    def read_back(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
        (stored,) = [s for s in jobs.list_schedules(conn) if s.schedule.name == result.name]
        return getattr(stored.schedule, field), value

    return call, read_back


LIMIT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "kind": st.one_of(TEXT, st.none()),
    "max_running": st.one_of(COUNTS, st.none()),
    "per_second": st.one_of(
        SECONDS, st.sampled_from([1e-300, 0.5, 1_000_000, 1_000_000.5, float("nan")])
    ),
}


def _limited(field: str) -> tuple[Call, ReadBack]:
    """A limit with ``field`` drawn (and a concurrency limit), set; reads back that field."""

    def call(conn: Connection, world: World, value: Any) -> object:
        fields: dict[str, Any] = {"tenant": world.tenant, "max_running": 1, field: value}
        limit = jobs.Limit(**fields)
        jobs.set_limit(conn, limit)
        return limit

    def read_back(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
        (stored,) = [
            s.limit for s in jobs.list_limits(conn, tenant=world.tenant) if s.limit == result
        ]
        return getattr(stored, field), value

    return call, read_back


def _batch(world: World) -> st.SearchStrategy[Any]:
    good = st.builds(
        jobs.NewJob, kind=st.just(world.kind), payload=st.just({}), tenant=st.just(world.tenant)
    )
    return st.one_of(
        st.lists(good, max_size=3), st.lists(st.one_of(good, ANYTHING), max_size=2), ANYTHING
    )


def _batch_read(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    stored = [jobs.get(conn, enqueued.job_id).kind for enqueued in result]
    return stored, [new.kind for new in value]


def _dequeue(field: str) -> Call:
    def call(conn: Connection, world: World, value: Any) -> object:
        arguments: dict[str, Any] = {"kinds": [world.kind], field: value}
        worker = arguments.pop("worker_id", "w")
        return jobs.dequeue(conn, worker, **arguments)

    return call


def _claimed_by(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    (job,) = result
    return (job.locked_by, jobs.get(conn, job.id).locked_by), (value, value)


def _lease(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    (job,) = result
    return jobs.get(conn, job.id).lease_expires_at - job.started_at, value


def _claim_batch(field: str) -> Call:
    """``claim_batch`` on a kind nothing uses: it commits, so it must claim nothing."""

    def call(conn: Connection, world: World, value: Any) -> object:
        arguments: dict[str, Any] = {
            "worker_id": "w",
            "kinds": [f"{world.kind}.none"],
            "limit": 10,
            "lease": timedelta(seconds=30),
            field: value,
        }
        worker = arguments.pop("worker_id")
        return jobs.claim_batch(conn, worker, **arguments)

    return call


def _not_none(value: object) -> bool:
    return value is not None


def _unclaimed(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    return [job.kind for job in result if job.kind.startswith(world.kind)], []


def _jobs_like_running(world: World) -> st.SearchStrategy[Any]:
    """The world's running job, or it with one fence field changed, or anything."""
    changed: st.SearchStrategy[dict[str, Any]] = st.one_of(
        st.builds(dict, id=IDS),
        st.builds(dict, locked_by=st.one_of(TEXT, st.none())),
        st.builds(dict, attempts=COUNTS),
    )
    return st.one_of(
        st.just(world.running),
        st.just(world.running),
        changed.map(lambda fields: replace(world.running, **fields)),
        ANYTHING,
    )


def _state(expected: jobs.JobState) -> ReadBack:
    def read_back(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
        return jobs.get(conn, world.running.id).state, expected

    return read_back


def _recorded(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    return jobs.get(conn, world.running.id).last_error, error_text(value)


def _retried(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    expected = jobs.JobState.QUEUED if value else jobs.JobState.DEAD
    return jobs.get(conn, world.running.id).state, expected


def _heartbeat_lease(
    conn: Connection, world: World, value: Any, result: Any
) -> tuple[object, object]:
    now = conn.execute(sa.select(sa.func.now())).scalar_one()
    lease_end = jobs.get(conn, world.running.id).lease_expires_at
    return None if lease_end is None else lease_end - now, value


def _dead_ids(world: World) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(world.dead.id), st.just(world.running.id), IDS)


def _requeued(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    return jobs.get(conn, value).state, jobs.JobState.QUEUED


def _filters(world: World) -> st.SearchStrategy[Any]:
    """Values of a kind or tenant filter: the world's, or anything."""
    return st.one_of(st.just(world.tenant), st.just(f"{world.kind}.dead"), st.none(), ANYTHING)


def _filtered(function: Callable[..., object], field: str) -> Call:
    """``function(conn, field=value)``."""
    return lambda conn, world, value: function(conn, **{field: value})


def _counted(field: str) -> ReadBack:
    """Every count of :func:`~dms.jobs.stats` is of the tenant or kind asked for."""

    def read_back(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
        if value is None:
            return None, None
        return {getattr(count, field) for count in result.counts} - {value}, set()

    return read_back


def _matching(field: str) -> ReadBack:
    def read_back(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
        if value is None:
            return None, None
        return {getattr(job, field) for job in result} - {value}, set()

    return read_back


def _tenants(world: World) -> st.SearchStrategy[Any]:
    """The world's tenant, valid names of no tenant, and anything."""
    slugs = st.from_regex(r"[a-z][a-z0-9_]{0,39}", fullmatch=True)
    return st.one_of(st.just(world.tenant), st.just(world.tenant), slugs, ANYTHING)


def _cancelled(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    return (result.state, jobs.get(conn, value).state), (jobs.JobState.CANCELLED,) * 2


def _states(world: World) -> st.SearchStrategy[Any]:
    states = st.sampled_from(jobs.JobState)
    return st.one_of(states, states.map(lambda state: state.value), states.map(str), ANYTHING)


def _in_state(conn: Connection, world: World, value: Any, result: Any) -> tuple[object, object]:
    if value is None:  # any state
        return None, None
    return {job.state for job in result} - {jobs.JobState(value)}, set()


ENQUEUE_FIELDS: list[tuple[str, Any, tuple[type[DmsError], ...]]] = [
    ("kind", TEXT, BEFORE_SQL),
    ("payload", PAYLOADS, BEFORE_SQL),
    ("idempotency_key", st.one_of(TEXT, st.none()), BEFORE_SQL),
    ("run_at", MOMENTS, BEFORE_SQL),
    ("priority", COUNTS, BEFORE_SQL),
    ("max_attempts", COUNTS, BEFORE_SQL),
    ("tenant", _tenants, (*BEFORE_SQL, TenantNotFound)),
]

ENTRY_POINTS: list[EntryPoint] = [
    *(
        EntryPoint(f"enqueue({field})", values, *_enqueued(field), refusals)
        for field, values, refusals in ENQUEUE_FIELDS
    ),
    EntryPoint(
        "enqueue(key_retention)",
        DURATIONS,
        _enqueued("key_retention", idempotency_key="retained")[0],
        _key_retention,
    ),
    *(
        EntryPoint(f"Backoff({part})", SECONDS, *_backoff(part))
        for part in ("initial_seconds", "step_seconds", "maximum_seconds")
    ),
    *(
        EntryPoint(f"Schedule({field})", values, *_scheduled(field))
        for field, values in SCHEDULE_FIELDS.items()
    ),
    EntryPoint(
        "remove_schedule(name)",
        st.one_of(TEXT, ANYTHING),
        lambda conn, world, value: jobs.remove_schedule(conn, value),
        refusals=(*BEFORE_SQL, NotFound),
    ),
    *(
        EntryPoint(f"Limit({field})", values, *_limited(field))
        for field, values in LIMIT_FIELDS.items()
    ),
    EntryPoint(
        "set_limit(limit)",
        lambda world: st.one_of(
            st.builds(
                jobs.Limit,
                tenant=st.one_of(
                    st.just(world.tenant), st.from_regex(r"[a-z][a-z0-9_]{0,39}", fullmatch=True)
                ),
                per_second=st.just(2.0),
            ),
            ANYTHING,
        ),
        lambda conn, world, value: jobs.set_limit(conn, value),
        refusals=(*BEFORE_SQL, TenantNotFound),
    ),
    EntryPoint(
        "remove_limit(tenant)",
        _tenants,
        lambda conn, world, value: jobs.remove_limit(conn, value),
        refusals=(*BEFORE_SQL, NotFound),
    ),
    EntryPoint(
        "remove_limit(kind)",
        st.one_of(TEXT, ANYTHING),
        lambda conn, world, value: jobs.remove_limit(conn, world.tenant, kind=value),
        refusals=(*BEFORE_SQL, NotFound),
    ),
    EntryPoint(
        "list_limits(tenant)",
        lambda world: st.one_of(_tenants(world), st.none()),
        lambda conn, world, value: jobs.list_limits(conn, tenant=value),
    ),
    EntryPoint(
        "register_schedules(schedules)",
        lambda world: st.one_of(
            st.lists(
                st.builds(
                    jobs.Schedule,
                    name=st.sampled_from(["a", "b"]),
                    cron=st.just("@daily"),
                    kind=st.just(world.kind),
                    tenant=st.just(world.tenant),
                ),
                max_size=3,
            ),
            ANYTHING,
        ),
        lambda conn, world, value: jobs.register_schedules(conn, value),
    ),
    EntryPoint(
        "NewJob(**fields)", NEW_JOB_FIELDS, _new_job, _new_job_read, (*BEFORE_SQL, TenantNotFound)
    ),
    EntryPoint(
        "enqueue_many(new_jobs)",
        _batch,
        lambda conn, world, value: jobs.enqueue_many(conn, value),
        _batch_read,
    ),
    EntryPoint("dequeue(worker_id)", TEXT, _dequeue("worker_id"), _claimed_by),
    EntryPoint(
        "dequeue(kinds)",
        lambda world: st.one_of(
            st.lists(st.one_of(st.just(world.kind), TEXT), max_size=3), ANYTHING
        ),
        lambda conn, world, value: jobs.dequeue(conn, "w", kinds=value),
        lambda conn, world, value, result: (
            {job.kind for job in result} - set(value or [job.kind for job in result]),
            set(),
        ),
    ),
    EntryPoint("dequeue(limit)", COUNTS, _dequeue("limit")),
    EntryPoint("dequeue(lease)", DURATIONS, _dequeue("lease"), _lease),
    EntryPoint("dequeue(reclaim)", FLAGS, _dequeue("reclaim")),
    *(
        EntryPoint(f"claim_batch({field})", values, _claim_batch(field), _unclaimed)
        for field, values in [
            ("worker_id", TEXT),
            # Not None (any kind): the claim commits, and would take other tests' jobs.
            ("kinds", st.one_of(st.lists(TEXT, max_size=3), ANYTHING.filter(_not_none))),
            ("limit", COUNTS),
            ("lease", DURATIONS),
        ]
    ),
    EntryPoint(
        "complete(job)",
        _jobs_like_running,
        lambda conn, world, value: jobs.complete(conn, value),
        _state(jobs.JobState.DONE),
        (*BEFORE_SQL, LeaseLost),
    ),
    EntryPoint(
        "complete_many(batch)",
        lambda world: st.one_of(
            st.lists(_jobs_like_running(world), max_size=3),
            st.lists(st.just(world.running), max_size=1),
            ANYTHING,
        ),
        lambda conn, world, value: jobs.complete_many(conn, value),
        lambda conn, world, value, result: (
            {job.id for job in result.lost} | set(result.completed),
            {job.id for job in value},
        ),
    ),
    EntryPoint(
        "fail(job)",
        _jobs_like_running,
        lambda conn, world, value: jobs.fail(conn, value, "boom"),
        _state(jobs.JobState.QUEUED),
        (*BEFORE_SQL, LeaseLost),
    ),
    EntryPoint(
        "fail(error)",
        ERRORS,
        lambda conn, world, value: jobs.fail(conn, world.running, value),
        _recorded,
    ),
    EntryPoint(
        "fail(backoff)",
        st.one_of(st.none(), st.just(jobs.Backoff()), ANYTHING),
        lambda conn, world, value: jobs.fail(conn, world.running, "boom", backoff=value),
        _state(jobs.JobState.QUEUED),
    ),
    EntryPoint(
        "fail(retry)",
        FLAGS,
        lambda conn, world, value: jobs.fail(conn, world.running, "boom", retry=value),
        _retried,
    ),
    EntryPoint(
        "heartbeat(job)",
        _jobs_like_running,
        lambda conn, world, value: jobs.heartbeat(conn, value),
        _state(jobs.JobState.RUNNING),
        (*BEFORE_SQL, LeaseLost),
    ),
    EntryPoint(
        "heartbeat(lease)",
        DURATIONS,
        lambda conn, world, value: jobs.heartbeat(conn, world.running, lease=value),
        _heartbeat_lease,
    ),
    EntryPoint(
        "release(job)",
        _jobs_like_running,
        lambda conn, world, value: jobs.release(conn, value),
        _state(jobs.JobState.QUEUED),
        (*BEFORE_SQL, LeaseLost),
    ),
    EntryPoint(
        "requeue_dead_letter(job_id)",
        _dead_ids,
        lambda conn, world, value: jobs.requeue_dead_letter(conn, value),
        _requeued,
        (*BEFORE_SQL, NotFound),
    ),
    *(
        EntryPoint(
            f"requeue_dead_letters({field})",
            _filters,
            _filtered(jobs.requeue_dead_letters, field),
            _matching(field),
        )
        for field in ("kind", "tenant")
    ),
    EntryPoint(
        "requeue_dead_letters(older_than)",
        DURATIONS,
        lambda conn, world, value: jobs.requeue_dead_letters(conn, older_than=value),
    ),
    *(
        EntryPoint(
            f"dead_letter({field})",
            _filters,
            _filtered(jobs.dead_letter, field),
            _matching(field),
        )
        for field in ("kind", "tenant")
    ),
    EntryPoint(
        "dead_letter(older_than)",
        DURATIONS,
        lambda conn, world, value: jobs.dead_letter(conn, older_than=value),
    ),
    EntryPoint(
        "dead_letter(limit)",
        COUNTS,
        lambda conn, world, value: jobs.dead_letter(conn, limit=value),
    ),
    EntryPoint(
        "get(job_id)",
        _dead_ids,
        lambda conn, world, value: jobs.get(conn, value),
        lambda conn, world, value, result: (result.id, value),
        (*BEFORE_SQL, NotFound),
    ),
    *(
        EntryPoint(
            f"stats({field})",
            _filters,
            _filtered(jobs.stats, field),
            _counted(field),
        )
        for field in ("kind", "tenant")
    ),
    EntryPoint(
        "count_expired_leases(older_than)",
        DURATIONS,
        lambda conn, world, value: jobs.count_expired_leases(conn, older_than=value),
    ),
    EntryPoint(
        "prune(older_than)",
        DURATIONS,
        lambda conn, world, value: jobs.prune(conn, older_than=value),
    ),
    EntryPoint(
        "prune(include_dead)",
        FLAGS,
        lambda conn, world, value: jobs.prune(conn, include_dead=value),
    ),
    EntryPoint(
        "cancel(job_id)",
        lambda world: st.one_of(
            st.just(world.queued.id), st.just(world.running.id), st.just(world.dead.id), IDS
        ),
        lambda conn, world, value: jobs.cancel(conn, value),
        _cancelled,
        (*BEFORE_SQL, NotFound),
    ),
    EntryPoint(
        "cancel_matching(states)",
        lambda world: st.one_of(st.lists(_states(world), max_size=3), _states(world)),
        lambda conn, world, value: jobs.cancel_matching(conn, tenant=world.tenant, states=value),
        lambda conn, world, value, result: (
            {job.state for job in result} - {jobs.JobState.CANCELLED},
            set(),
        ),
    ),
    *(
        EntryPoint(
            f"cancel_matching({field})",
            _filters,
            _filtered(jobs.cancel_matching, field),
            _matching(field),
        )
        for field in ("kind", "tenant")
    ),
    EntryPoint(
        "list_jobs(state)",
        _states,
        lambda conn, world, value: jobs.list_jobs(conn, state=value, tenant=world.tenant),
        _in_state,
    ),
    *(
        EntryPoint(
            f"list_jobs({field})", _filters, _filtered(jobs.list_jobs, field), _matching(field)
        )
        for field in ("kind", "tenant")
    ),
    EntryPoint(
        "list_jobs(limit)",
        COUNTS,
        lambda conn, world, value: jobs.list_jobs(conn, tenant=world.tenant, limit=value),
        lambda conn, world, value, result: (len(result) <= value, True),
    ),
    EntryPoint(
        "reclaim_expired(kinds)",
        st.one_of(st.lists(TEXT, max_size=3), ANYTHING),
        lambda conn, world, value: jobs.reclaim_expired(conn, kinds=value),
    ),
    EntryPoint(
        "reclaim_expired(limit)",
        COUNTS,
        lambda conn, world, value: jobs.reclaim_expired(conn, limit=value),
    ),
]

_SETTINGS: dict[str, Any] = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    # Each example opens a transaction on a busy shared server; some values are megabytes.
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[entry.name for entry in ENTRY_POINTS])
@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(data=st.data())
def test_a_value_is_stored_intact_or_refused_with_nothing_changed(
    engine: Engine, world: World, entry: EntryPoint, data: st.DataObject
) -> None:
    values = entry.values(world) if callable(entry.values) else entry.values
    run(engine, world, entry, data.draw(values, label="value"))


_ONE = uuid.UUID(int=1)
#: Values that reached the driver or broke Python before this contract (issue 10).
KNOWN_HOSTILE: list[tuple[str, object]] = [
    *(
        (entry, text)
        for entry in (
            "enqueue(kind)",
            "enqueue(idempotency_key)",
            "dequeue(worker_id)",
            "claim_batch(worker_id)",
        )
        for text in ("a\x00b", "a\ud800b", "\udfff")
    ),
    ("dequeue(kinds)", ["a\x00"]),
    ("dequeue(kinds)", ["\udcff"]),
    ("dequeue(kinds)", "a string is not a list of kinds"),
    ("reclaim_expired(kinds)", ["\x00"]),
    ("enqueue(payload)", {"a": "\x00"}),
    ("enqueue(payload)", {"\x00": 1}),
    ("enqueue(payload)", ["\ud800"]),
    ("enqueue(payload)", None),
    ("enqueue(payload)", nested(100_000)),
    ("enqueue(payload)", nested(MAX_PAYLOAD_DEPTH + 1)),
    ("enqueue(payload)", "p" * (MAX_PAYLOAD_CHARS + 1)),
    ("enqueue(payload)", {"big": 1e23}),
    ("enqueue(payload)", (1, 2)),
    ("enqueue(payload)", {1: "one"}),
    ("enqueue(run_at)", datetime.max.replace(tzinfo=timezone(-timedelta(hours=1)))),
    ("enqueue(run_at)", datetime(2026, 1, 1)),
    ("enqueue(key_retention)", timedelta.max),
    ("enqueue(key_retention)", MAX_KEY_RETENTION + timedelta(microseconds=1)),
    ("Backoff(initial_seconds)", 1e15),
    ("Backoff(step_seconds)", float("nan")),
    ("Backoff(maximum_seconds)", 10**400),
    ("fail(error)", None),
    ("fail(retry)", "yes"),
    ("get(job_id)", str(_ONE)),
    ("requeue_dead_letter(job_id)", 1),
    ("stats(tenant)", "no\x00such"),
    ("stats(kind)", "\ud800"),
    ("prune(older_than)", timedelta.max),
    ("count_expired_leases(older_than)", timedelta.max),
]
_BY_NAME = {entry.name: entry for entry in ENTRY_POINTS}


@pytest.mark.parametrize(("name", "value"), KNOWN_HOSTILE, ids=[n for n, _ in KNOWN_HOSTILE])
def test_known_hostile_values_are_refused_before_any_sql(
    engine: Engine, world: World, name: str, value: object
) -> None:
    run(engine, world, _BY_NAME[name], value, expect="refused")


#: Values refused before this contract that must be accepted intact.
KNOWN_GOOD: list[tuple[str, object]] = [
    ("enqueue(payload)", {"text": "\\u0000"}),
    ("enqueue(payload)", {"emoji": "😀", "astral": "\U0010ffff"}),
    ("enqueue(payload)", nested(MAX_PAYLOAD_DEPTH)),
    ("enqueue(payload)", {"float": 1e15 + 0.5, "int": 10**30}),
    ("enqueue(run_at)", datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=23, minutes=59)))),
    ("enqueue(key_retention)", MAX_KEY_RETENTION),
    ("fail(error)", "scan-\udcff.pdf \x00"),
]


@pytest.mark.parametrize(("name", "value"), KNOWN_GOOD, ids=[n for n, _ in KNOWN_GOOD])
def test_known_good_values_are_accepted_intact(
    engine: Engine, world: World, name: str, value: object
) -> None:
    run(engine, world, _BY_NAME[name], value, expect="accepted")


def test_the_snapshot_sees_a_change(engine: Engine, world: World) -> None:
    """Control: a write to the queue changes the snapshot."""
    with engine.connect() as conn, conn.begin():
        jobs.enqueue(conn, world.kind, {}, tenant=world.tenant)
        assert snapshot(conn) != world.snapshot


def test_the_statement_check_sees_sql(engine: Engine, world: World) -> None:
    """Control: a statement sent on the connection is recorded."""
    with engine.connect() as conn, statements_sent(conn) as sent:
        jobs.get(conn, world.queued.id)
    assert len(sent) == 1


def test_a_refusal_of_the_wrong_kind_fails_the_example(engine: Engine, world: World) -> None:
    """Control: an entry point that may not refuse a value fails the run when it does."""
    entry = replace(_BY_NAME["get(job_id)"], refusals=(ValidationError,))
    with pytest.raises(pytest.fail.Exception, match="refused"):
        run(engine, world, entry, uuid.uuid4())
