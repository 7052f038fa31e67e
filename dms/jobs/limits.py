"""Per-tenant limits: how many of a tenant's jobs run at once, and how many start a second.

A :class:`Limit` holds for one tenant's jobs of every kind, or (``kind``) of one kind; a tenant
may have both, and every one that applies to a job must allow it. ``max_running`` bounds the
tenant's (or kind's) jobs ``running`` at once, ``0`` pausing them; ``per_second`` bounds how
many start a second, as a token bucket that holds one second's worth (at least one job), so a
quiet tenant may start that many at once. Limits are rows of ``dms.job_limits``, set with
:func:`set_limit` or ``dms jobs limit``, and read by every claim: a change holds for the next
claim of every worker, no restart.

**How a claim keeps them, across any number of workers.** Before its claim a worker locks the
limited tenants that have runnable jobs (a transaction-level advisory lock each, skipped when
another claim holds it, never waited for); the claim, a statement of its own and so with a
snapshot taken after the lock, counts the tenant's running jobs, refills and spends its tokens,
and takes no more than they allow, all in the one transaction (and one round trip:
:func:`~dms.jobs.pipeline.claim_batch`). A limited tenant is claimed by one claim at a time;
tenants without limits are not touched by any of this. A job whose lease expired still counts
as running until it is taken back, so a crashed worker's jobs never let more start.

**What a limit does not do.** It never fails or drops a job: jobs above it wait, ``queued``.
It bounds claims, not handlers: the jobs a worker claims ahead for its runners count as running
from the claim. A claim walks a limited tenant like any other, so the tenant's share of a claim
is its fair share or less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlalchemy.engine import RowMapping

from dms import tenancy
from dms.domain.validation import shown
from dms.driver_errors import refused
from dms.errors import NotFound, ValidationError
from dms.jobs import _statements as statements
from dms.jobs._translation import tenant_dropped
from dms.jobs.enqueue import require_tenants
from dms.jobs.executor import Executor, connection_of
from dms.jobs.validation import INT32, require_optional_name

#: The highest rate limit, in jobs a second.
MAX_PER_SECOND = 1_000_000.0
#: How ``kind`` is stored for a limit of a tenant's jobs of every kind (a kind is never blank).
EVERY_KIND = ""


@dataclass(frozen=True, kw_only=True)
class Limit:
    """A tenant's limits on its jobs (of ``kind``; ``None``: of every kind).

    Invalid values raise :class:`~dms.errors.ValidationError` here: ``max_running`` an integer
    from 0 (paused) to 2**31 - 1, ``per_second`` a finite number above 0 and at most
    :data:`MAX_PER_SECOND`, at least one of them given.
    """

    tenant: str
    kind: str | None = None
    max_running: int | None = None
    per_second: float | None = None

    def __post_init__(self) -> None:
        """Check everything that can be checked without the database."""
        tenancy.validate_slug(self.tenant)
        require_optional_name("kind", self.kind)
        if self.max_running is None and self.per_second is None:
            raise ValidationError("a limit needs max_running, per_second or both")
        if self.max_running is not None:
            _require_max_running(self.max_running)
        if self.per_second is not None:
            _require_per_second(self.per_second)


@dataclass(frozen=True)
class LimitState:
    """A limit as set, and how many jobs it counts running now."""

    limit: Limit
    running: int


def set_limit(target: Executor, limit: Limit) -> None:
    """Set ``limit``, replacing the tenant's limit of that kind (or of every kind) if any.

    Its rate limit starts full. Raises :class:`~dms.errors.ValidationError` for a value that
    is not a :class:`Limit` and :class:`~dms.errors.TenantNotFound` for an unregistered tenant.
    Takes effect at the next claim of every worker once the caller commits.
    """
    if not isinstance(limit, Limit):
        raise ValidationError(f"set_limit takes a Limit, not {shown(limit)}")
    conn = connection_of(target)
    require_tenants(conn, [limit.tenant])
    params = {
        "tenant": limit.tenant,
        "kind": _stored_kind(limit.kind),
        "max_running": limit.max_running,
        "per_second": None if limit.per_second is None else float(limit.per_second),
    }
    with refused(tenant_dropped(f"tenant {limit.tenant!r} was dropped meanwhile")):
        conn.execute(statements.set_limit_statement(), params)


def remove_limit(target: Executor, tenant: str, *, kind: str | None = None) -> None:
    """Delete the limit of ``tenant``'s jobs of ``kind`` (``None``: the one of every kind).

    Raises :class:`~dms.errors.NotFound` when there is none; the tenant's other limits stay.
    """
    tenancy.validate_slug(tenant)
    require_optional_name("kind", kind)
    removed = connection_of(target).execute(
        statements.remove_limit_statement(), {"tenant": tenant, "kind": _stored_kind(kind)}
    )
    if removed.first() is None:
        what = "every kind" if kind is None else f"kind {kind!r}"
        raise NotFound(f"tenant {tenant!r} has no limit on {what}")


def list_limits(target: Executor, *, tenant: str | None = None) -> list[LimitState]:
    """Every limit (of ``tenant``) with the jobs it counts running, by tenant, then kind."""
    if tenant is not None:
        tenancy.validate_slug(tenant)
    rows = connection_of(target).execute(
        statements.list_limits_statement(tenant), {"tenant": tenant}
    )
    return [_state(row) for row in rows.mappings()]


def _state(row: RowMapping) -> LimitState:
    limit = Limit(
        tenant=row["tenant"],
        kind=None if row["kind"] == EVERY_KIND else row["kind"],
        max_running=row["max_running"],
        per_second=row["per_second"],
    )
    return LimitState(limit, running=row["running"])


def _stored_kind(kind: str | None) -> str:
    return EVERY_KIND if kind is None else kind


def _require_max_running(value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT32:
        raise ValidationError(
            f"max_running must be an integer from 0 to {INT32}, not {shown(value)}"
        )


def _require_per_second(value: object) -> None:
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    # Compared before isfinite, which cannot take an int too large for a float.
    if number is None or not 0 < number <= MAX_PER_SECOND or not math.isfinite(number):
        raise ValidationError(
            f"per_second must be a number above 0 and at most {MAX_PER_SECOND:,.0f}, "
            f"not {shown(value)}"
        )
