"""Periodic jobs: a :class:`Schedule` enqueues its job at every tick of a cron expression.

Schedules are rows of ``dms.job_schedules``, registered in code (:func:`register_schedules`,
``WorkerConfig(schedules=...)``, ``dms worker --app``) or with ``dms jobs schedule``, and listed by
``dms jobs schedules``. Every running :class:`~dms.jobs.Worker` ticks them about once a second
(:func:`tick_schedules`): it locks the due rows with ``FOR UPDATE SKIP LOCKED``, enqueues one job
per due tick and moves ``next_run_at`` past those ticks in the same transaction. So each tick is
enqueued exactly once however many workers tick, and a worker that dies mid-pass leaves
neither the jobs nor the move behind. Time is the database's clock, never a worker's.

Cron expressions have one form: five fields, ``minute hour day month weekday``, as crontab(5)
has them, or one of its names for such an expression (``@hourly``, ``@daily``, ``@weekly``,
``@monthly``, ``@yearly``; :data:`CRON_FORM`). Every other number of fields is refused
(:func:`require_five_fields`): croniter (pallets-eco, the library procrastinate and pgqueuer
use, which reads them) takes a sixth field as seconds and a seventh as the year, while Quartz
and Spring put seconds first, so ``*/10 * * * * *`` meant every second of every tenth minute
to croniter and every ten seconds to Quartz. The finest tick is therefore a minute.
Expressions are read in the schedule's IANA time zone (UTC by default; daylight saving time as
croniter handles it). A job's ``run_at`` is its tick. A schedule stored before this rule with
another number of fields is listed as it is but never ticked (its next run becomes
:data:`NEVER`, said at ERROR once): register it again with five fields, or remove it.

Ticks missed while no worker ran: a tick at most ``catch_up`` old (default
:data:`CATCH_UP`) when a worker comes by is still enqueued, each one, in order; older ticks are
skipped, logged at WARNING and recorded in ``skipped_until``. A pass enqueues at most
:data:`MAX_TICKS_PER_PASS` ticks of one schedule; the next pass goes on from there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, croniter
from sqlalchemy.engine import Connection, RowMapping

from dms.domain.validation import shown
from dms.driver_errors import refused
from dms.errors import NotFound, ValidationError
from dms.jobs import _statements as statements
from dms.jobs._translation import tenant_dropped
from dms.jobs.enqueue import DEFAULT_MAX_ATTEMPTS, NewJob, enqueue_many, require_tenants
from dms.jobs.executor import Executor, connection_of
from dms.jobs.validation import require_duration, require_name

log = logging.getLogger(__name__)

#: How old a missed tick may be and still be enqueued, by default.
CATCH_UP = timedelta(minutes=10)
#: The longest catch-up window a schedule may ask for.
MAX_CATCH_UP = timedelta(days=7)
#: Most ticks of one schedule enqueued by one pass (a schedule of every minute catching up on
#: its longest window is 10,080).
MAX_TICKS_PER_PASS = 1000
#: Most due schedules one pass locks and ticks.
SCHEDULES_PER_PASS = 100
#: The next tick of a schedule that has no more ticks.
NEVER = datetime.max.replace(tzinfo=timezone.utc)
#: The time a new expression is tried from: one that never fires after it is refused.
_REFERENCE = datetime(2000, 1, 1, tzinfo=timezone.utc)
#: The one form of a cron expression, as error messages and ``--help`` name it.
CRON_FORM = "five fields (minute hour day month weekday), or @hourly, @daily and the like"
#: Fields of a cron expression.
CRON_FIELDS = 5


def require_five_fields(cron: str) -> None:
    """Raise :class:`~dms.errors.ValidationError` unless ``cron`` has :data:`CRON_FORM`.

    Only the number of fields (or a name starting ``@``) is checked here; croniter then reads
    the fields themselves (:meth:`Schedule.next_tick`).
    """
    if not _has_cron_form(cron):
        raise ValidationError(
            f"cron must be a cron expression of {CRON_FORM}, not {shown(cron)}: "
            f"{len(cron.split())} fields"
        )


def _has_cron_form(cron: str) -> bool:
    fields = cron.split()
    return len(fields) == CRON_FIELDS or (len(fields) == 1 and fields[0].startswith("@"))


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A job (``kind``, ``payload``, ``tenant``, ...) to enqueue at every tick of ``cron``.

    Invalid values raise :class:`~dms.errors.ValidationError` here, naming the field: a cron
    expression of another number of fields than five (:func:`require_five_fields`), one
    croniter does not read, or one that never fires; a time zone the system's
    time-zone database does not know; and anything :class:`~dms.jobs.NewJob` refuses.
    """

    name: str
    cron: str
    kind: str
    tenant: str
    payload: Any = field(default_factory=dict)
    timezone: str = "UTC"
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    catch_up: timedelta = CATCH_UP

    def __post_init__(self) -> None:
        """Check everything that can be checked without the database."""
        require_name("name", self.name)
        require_name("cron", self.cron)
        require_five_fields(self.cron)
        require_name("timezone", self.timezone)
        self.job_at(_REFERENCE)  # the job's fields, as enqueue would check them
        require_duration("catch_up", self.catch_up, maximum=MAX_CATCH_UP, zero=True)
        self.next_tick(_REFERENCE)

    def job_at(self, tick: datetime) -> NewJob:
        """The job this schedule enqueues for ``tick``."""
        return NewJob(
            kind=self.kind,
            payload=self.payload,
            tenant=self.tenant,
            run_at=tick,
            priority=self.priority,
            max_attempts=self.max_attempts,
        )

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after ``after`` (aware), in UTC."""
        try:
            zone = ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValidationError(
                f"timezone must be an IANA time zone such as Europe/Berlin, not "
                f"{shown(self.timezone)}"
            ) from None
        try:
            tick = croniter(self.cron, after.astimezone(zone)).get_next(datetime)
        except CroniterBadDateError:  # a ValueError too: caught first
            raise ValidationError(
                f"cron {shown(self.cron)} never fires after {after.isoformat()}"
            ) from None
        except (CroniterBadCronError, ValueError, KeyError):
            raise ValidationError(
                f"cron must be a cron expression of {CRON_FORM}, not {shown(self.cron)}"
            ) from None
        return tick.astimezone(timezone.utc)


@dataclass(frozen=True)
class ScheduleState:
    """A registered schedule and where it has come."""

    schedule: Schedule
    #: The first tick not yet enqueued.
    next_run_at: datetime
    #: The latest tick enqueued, if any.
    last_tick_at: datetime | None
    #: The latest tick skipped for being older than ``catch_up``, if any.
    skipped_until: datetime | None


@dataclass(frozen=True)
class Tick:
    """What one pass enqueued for one schedule."""

    name: str
    #: The ticks enqueued, oldest first (a job each, whose ``run_at`` is the tick).
    ticks: tuple[datetime, ...]
    #: The latest tick skipped for being older than ``catch_up``, if any were.
    skipped_until: datetime | None


def register_schedules(target: Executor, schedules: Iterable[Schedule]) -> None:
    """Insert ``schedules``, or replace the registered ones of their names.

    A replaced schedule keeps its next tick unless its cron expression or time zone changed
    (then its next tick is the first after now), so registering the same schedules at every
    start neither skips nor repeats a tick. The last registration of a name wins, from code or
    from the command line alike. Raises :class:`~dms.errors.ValidationError` for a value that
    is not a :class:`Schedule` or for two schedules of one name, and
    :class:`~dms.errors.TenantNotFound` for an unregistered tenant (checked first).
    """
    batch = require_schedules(schedules)
    if not batch:
        return
    conn = connection_of(target)
    require_tenants(conn, sorted({schedule.tenant for schedule in batch}))
    now = _database_now(conn)
    rows = [_row(schedule, next_run_at=schedule.next_tick(now)) for schedule in batch]
    with refused(tenant_dropped("a tenant of the schedules was dropped meanwhile")):
        conn.execute(statements.register_schedule_statement(), rows)


def remove_schedule(target: Executor, name: str) -> None:
    """Delete the schedule ``name``; its jobs already enqueued stay.

    Raises :class:`~dms.errors.NotFound` when no schedule has that name.
    """
    require_name("name", name)
    removed = connection_of(target).execute(
        statements.remove_schedule_statement(), {"schedule_name": name}
    )
    if removed.first() is None:
        raise NotFound(f"no schedule is named {name!r}")


def list_schedules(target: Executor) -> list[ScheduleState]:
    """Every registered schedule with its next tick, by name."""
    rows = connection_of(target).execute(statements.list_schedules_statement()).mappings()
    return [_state(row) for row in rows]


def tick_schedules(target: Executor) -> list[Tick]:
    """Enqueue the due ticks of the schedules no other pass holds; one :class:`Tick` each.

    Runs in the caller's transaction, which must commit for the jobs and the schedules' moves
    to count (a worker's ticker commits after each pass). See the module's text for the rules.
    """
    conn = connection_of(target)
    rows = (
        conn.execute(statements.due_schedules_statement(), {"limit": SCHEDULES_PER_PASS})
        .mappings()
        .all()
    )
    if not rows:
        return []
    due = [_state(row) for row in rows]
    passes = [_pass(state, rows[0]["now"]) for state in due]
    enqueue_many(
        conn,
        [
            state.schedule.job_at(at)
            for state, (tick, _) in zip(due, passes, strict=True)
            for at in tick.ticks
        ],
    )
    conn.execute(
        statements.advance_schedule_statement(),
        [
            {
                "schedule_name": tick.name,
                "next_run_at": next_run_at,
                "last_tick_at": tick.ticks[-1] if tick.ticks else None,
                "skipped_until": tick.skipped_until,
            }
            for tick, next_run_at in passes
        ],
    )
    for tick, _ in passes:
        if tick.skipped_until is not None:
            log.warning(
                "schedule %s: ticks until %s were missed for longer than its catch-up window "
                "and are skipped",
                tick.name,
                tick.skipped_until.isoformat(),
            )
    return [tick for tick, _ in passes]


def _pass(state: ScheduleState, now: datetime) -> tuple[Tick, datetime]:
    """The ticks of ``state`` due at ``now``, and its next tick after them."""
    schedule = state.schedule
    if not _has_cron_form(schedule.cron):
        log.error(
            "schedule %s: cron %s is not five fields (minute hour day month weekday) and is "
            "never ticked: register it again with five fields, or remove it",
            schedule.name,
            shown(schedule.cron),
        )
        return Tick(schedule.name, (), None), NEVER
    tick = state.next_run_at
    skipped_until = None
    oldest = now - schedule.catch_up
    if tick < oldest:
        # Jump over the skipped span instead of walking it: a schedule of every minute idle
        # for a year would take half a million steps.
        skipped_until = _previous_tick(schedule, oldest, after=tick)
        tick = _next_or_never(schedule, oldest - timedelta(microseconds=1))
    ticks: list[datetime] = []
    while tick <= now and len(ticks) < MAX_TICKS_PER_PASS:
        ticks.append(tick)
        tick = _next_or_never(schedule, tick)
    return Tick(schedule.name, tuple(ticks), skipped_until), tick


def _next_or_never(schedule: Schedule, after: datetime) -> datetime:
    """The next tick after ``after``, or :data:`NEVER` after the last one.

    Five fields always have a next tick once one was found (:class:`Schedule` checks that);
    should croniter find none, the schedule stays, listed, and is never due again.
    """
    try:
        return schedule.next_tick(after)
    except ValidationError:  # a registered schedule was read fine: it has no tick left
        return NEVER


def _previous_tick(schedule: Schedule, before: datetime, *, after: datetime) -> datetime:
    """The last tick strictly before ``before``; ``after``, a tick before it, bounds it."""
    zone = ZoneInfo(schedule.timezone)
    previous = croniter(schedule.cron, before.astimezone(zone)).get_prev(datetime)
    return max(previous.astimezone(timezone.utc), after)


def _database_now(conn: Connection) -> datetime:
    now: datetime = conn.execute(statements.database_now_statement()).scalar_one()
    return now


def require_schedules(schedules: object) -> list[Schedule]:
    """``schedules`` as a list of :class:`Schedule` of distinct names, or a ValidationError."""
    if isinstance(schedules, str | bytes | Mapping) or not isinstance(schedules, Iterable):
        raise ValidationError(f"schedules must be a list of Schedule, not {shown(schedules)}")
    batch = list(schedules)
    names: set[str] = set()
    for schedule in batch:
        if not isinstance(schedule, Schedule):
            raise ValidationError(
                f"schedules must hold Schedule values only, not {shown(schedule)}"
            )
        if schedule.name in names:
            raise ValidationError(f"two schedules are named {schedule.name!r}")
        names.add(schedule.name)
    return batch


def _row(schedule: Schedule, *, next_run_at: datetime) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        "kind": schedule.kind,
        "payload": schedule.payload,
        "tenant": schedule.tenant,
        "priority": schedule.priority,
        "max_attempts": schedule.max_attempts,
        "catch_up": schedule.catch_up,
        "next_run_at": next_run_at,
    }


def _state(row: RowMapping) -> ScheduleState:
    fields = {
        "name": row["name"],
        "kind": row["kind"],
        "tenant": row["tenant"],
        "payload": row["payload"],
        "timezone": row["timezone"],
        "priority": row["priority"],
        "max_attempts": row["max_attempts"],
        "catch_up": row["catch_up"],
    }
    cron = row["cron"]
    if _has_cron_form(cron):
        schedule = Schedule(cron=cron, **fields)
    else:
        # Stored before five fields were required: listed and removable as it is, never
        # ticked (_pass). Checked as any schedule but for its cron, then given its own.
        schedule = Schedule(cron="* * * * *", **fields)
        object.__setattr__(schedule, "cron", cron)
    return ScheduleState(schedule, row["next_run_at"], row["last_tick_at"], row["skipped_until"])
