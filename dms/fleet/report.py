"""What a fleet operation did: one record per tenant, and the run as a whole.

Every fleet operation (creating, dropping and migrating many tenants) ends with a
:class:`FleetReport`: one :class:`TenantReport` per tenant it was asked about (tenant, revision
before and after, seconds, :class:`Outcome`, error), the shared schema's where it moved, and,
when the run stopped before the end, why. ``dms ... --json`` prints :meth:`FleetReport.as_json`.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


class Outcome(enum.Enum):
    """How one tenant ended in a fleet operation."""

    MIGRATED = "migrated"
    """Moved to the target revision (committed)."""
    CREATED = "created"
    """Created at the head revision (committed)."""
    DROPPED = "dropped"
    """Dropped with all its data (committed)."""
    REINDEXED = "reindexed"
    """Its stale search index rows rebuilt (committed)."""
    SKIPPED = "skipped"
    """Already at the target revision (or nothing stale to reindex): nothing to do."""
    EXISTS = "exists"
    """Not created: a tenant of that name exists."""
    NOT_FOUND = "not_found"
    """Not dropped: no tenant of that name exists."""
    INVALID = "invalid"
    """Not a valid tenant name: refused before any SQL."""
    FAILED = "failed"
    """Rolled back after an error; the others went on."""
    INTERRUPTED = "interrupted"
    """Rolled back: the run was stopped while this tenant was under way."""
    PENDING = "pending"
    """Not started: the run stopped first."""

    @property
    def is_problem(self) -> bool:
        """Whether the operator asked for something that did not happen."""
        return self in _PROBLEMS

    @property
    def is_unfinished(self) -> bool:
        """Whether running the same command again would still do something for this tenant."""
        return self in _UNFINISHED


_PROBLEMS = frozenset(
    {
        Outcome.EXISTS,
        Outcome.NOT_FOUND,
        Outcome.INVALID,
        Outcome.FAILED,
        Outcome.INTERRUPTED,
        Outcome.PENDING,
    }
)
_UNFINISHED = frozenset({Outcome.FAILED, Outcome.INTERRUPTED, Outcome.PENDING})


@dataclass(frozen=True, kw_only=True)
class TenantReport:
    """One tenant in a fleet operation: where it was, where it is, how long, how it ended."""

    tenant: str
    from_revision: str | None
    """Its revision before (``None``: base, or the tenant did not exist)."""
    to_revision: str | None
    """Its revision afterwards (``None``: base, or the tenant does not exist)."""
    seconds: float
    outcome: Outcome
    error: str | None = None
    lost_connection: bool = field(default=False, compare=False)
    """The database connection broke: the run stops, since the next tenant would fail too."""

    def as_json(self) -> dict[str, Any]:
        """The record of ``--json``: tenant, from, to, seconds, outcome, error."""
        return {
            "tenant": self.tenant,
            "from": self.from_revision,
            "to": self.to_revision,
            "seconds": round(self.seconds, 4),
            "outcome": self.outcome.value,
            "error": self.error,
        }

    def describe(self) -> str:
        """One line for people, e.g. ``tenant 'acme': failed at 0002: DuplicateTable: ...``."""
        where = self.to_revision or "base"
        text = f"tenant {self.tenant!r}: {self.outcome.value.replace('_', ' ')}"
        if self.outcome in (Outcome.FAILED, Outcome.INTERRUPTED):
            text += f", stayed at {where}"
        return f"{text}: {self.error}" if self.error else text


@dataclass(frozen=True, kw_only=True)
class FleetReport:
    """A whole fleet operation: every tenant's record, and why it stopped early, if it did."""

    operation: str
    """``create``, ``drop``, ``upgrade``, ``downgrade`` or ``reindex``."""
    target: str | None
    """The revision every tenant was to reach (``None``: base; create and drop: head/none)."""
    tenants: tuple[TenantReport, ...]
    shared: TenantReport | None = None
    """The shared schema, when the operation migrated it."""
    stopped: str | None = None
    """Why the run ended before every tenant was done (``None``: it ran to the end)."""

    def count(self, outcome: Outcome) -> int:
        """How many tenants ended with ``outcome``."""
        return sum(1 for report in self.tenants if report.outcome is outcome)

    @property
    def problems(self) -> tuple[TenantReport, ...]:
        """The tenants for which the operation did not do what was asked."""
        return tuple(report for report in self.tenants if report.outcome.is_problem)

    @property
    def unfinished(self) -> tuple[TenantReport, ...]:
        """The tenants that running the same command again would still work on."""
        return tuple(report for report in self.tenants if report.outcome.is_unfinished)

    def how_far(self) -> str:
        """How far the operation got, in words: ``12 of 40 tenant(s) at 0004, 28 left ...``."""
        left = len(self.unfinished)
        done = len(self.tenants) - left
        if self.operation in ("create", "drop", "reindex"):
            verb = {"create": "created", "drop": "dropped"}.get(self.operation, "reindexed")
            return f"{done} of {len(self.tenants)} tenant(s) {verb} or already so, {left} not"
        shared = ""
        if self.operation == "downgrade" and self.shared is None and not left:
            shared = " (the shared schema not yet)"
        return (
            f"{done} of {len(self.tenants)} tenant(s) at {self.target or 'base'}{shared}, "
            f"{left} left as they were"
        )

    def summary(self) -> dict[str, int]:
        """How many tenants ended with each outcome (only outcomes that occurred)."""
        counts = Counter(report.outcome for report in self.tenants)
        return {outcome.value: counts[outcome] for outcome in Outcome if counts[outcome]}

    def as_json(self) -> dict[str, Any]:
        """The whole report as one JSON object (``--json``)."""
        return {
            "operation": self.operation,
            "target": self.target,
            "stopped": self.stopped,
            "summary": self.summary(),
            "shared": None if self.shared is None else self.shared.as_json(),
            "tenants": [report.as_json() for report in self.tenants],
        }


def stopped_message(report: FleetReport) -> str:
    """Why a run stopped and how far it got, on one line."""
    return f"{report.stopped or 'stopped'}: {report.how_far()}"
