"""A worker's settings: :class:`WorkerConfig`, checked whole when it is made.

What a :class:`~dms.jobs.Worker` runs (its handlers, the unit of work they get) is code, given
to the worker itself; how it runs (threads, kinds, lease, polling, batches, schedules) is this
value, which can be built once (from a command line, say), shared and compared. Every field is
checked here, before any SQL runs or any thread starts (limits in :mod:`._arguments`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType

from sqlalchemy.engine import URL

from dms.domain.validation import check_flag
from dms.errors import ValidationError
from dms.jobs.backoff import Backoff
from dms.jobs.claims import LEASE_SECONDS
from dms.jobs.schedules import Schedule, require_schedules
from dms.jobs.worker import _arguments as arguments

#: Seconds an idle claimer waits for a notification before it polls the queue anyway.
POLL_SECONDS = 2.0
#: Seconds that running jobs get to finish after a stop before they are released.
GRACE_SECONDS = 30.0
#: Most jobs claimed by one statement, and completed by one statement, by default.
BATCH_SIZE = 500
#: Most jobs a worker claims ahead of its runner threads, by default (see :mod:`._window`).
PREFETCH = 1000


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """How a worker runs; every field checked when the config is made.

    A bad value raises :class:`~dms.errors.ValidationError`. The fields are normalised:
    ``kinds`` a sorted tuple without duplicates, ``backoff`` a read-only mapping, ``schedules``
    a tuple, seconds floats.
    """

    concurrency: int = 1
    """Runner threads: jobs run at once (up to ``MAX_CONCURRENCY``)."""
    kinds: Collection[str] | None = None
    """Job kinds to claim; ``None``: the kinds of the worker's handlers. A kind without a
    handler is refused by the worker (it would only send its jobs to the dead letter)."""
    lease: timedelta = timedelta(seconds=LEASE_SECONDS)
    """How long a claimed job is the worker's without a renewal (renewed every third)."""
    poll_seconds: float = POLL_SECONDS
    """Seconds an idle claimer waits for a notification before it polls anyway."""
    grace_seconds: float = GRACE_SECONDS
    """Seconds running jobs get to finish after a stop before they are released."""
    backoff: Mapping[str, Backoff] | None = None
    """Retry policies per kind (a job's own policy still wins)."""
    listen: bool = True
    """Wake up on ``NOTIFY`` (a ``LISTEN`` session) rather than by polling alone."""
    listen_url: str | URL | None = None
    """Where to ``LISTEN`` (``None``: the engine's URL; behind PgBouncer in transaction mode,
    the server's own)."""
    name: str | None = None
    """The worker's name in the queue (``None``: host, process id and a random suffix)."""
    batch_size: int = BATCH_SIZE
    """Most jobs per claim or completion statement."""
    prefetch: int = PREFETCH
    """Most jobs claimed ahead of the runners. Within it, the worker claims ahead what its
    runners finish in a few claim round trips at their current pace, and at least one job per
    runner (:mod:`._window`): many short jobs get large claims, long jobs are not hoarded."""
    schedules: Collection[Schedule] = ()
    """Periodic jobs (:class:`~dms.jobs.Schedule`) that the worker registers when it starts;
    every worker ticks every registered schedule, whoever registered it."""

    def __post_init__(self) -> None:
        """Check and normalise every field."""
        checked: dict[str, object] = {
            "concurrency": arguments.count(
                "concurrency", self.concurrency, minimum=1, maximum=arguments.MAX_CONCURRENCY
            ),
            "kinds": None if self.kinds is None else arguments.kinds(self.kinds),
            "lease": arguments.lease(self.lease),
            "poll_seconds": arguments.seconds("poll_seconds", self.poll_seconds, positive=True),
            "grace_seconds": arguments.seconds("grace_seconds", self.grace_seconds, positive=False),
            "backoff": MappingProxyType(arguments.backoffs(self.backoff)),
            "listen": check_flag("listen", self.listen),
            "listen_url": _listen_url(self.listen_url),
            "name": None if self.name is None else arguments.name("name", self.name),
            "batch_size": arguments.count(
                "batch_size", self.batch_size, minimum=1, maximum=arguments.MAX_BATCH_SIZE
            ),
            "prefetch": arguments.count(
                "prefetch", self.prefetch, minimum=0, maximum=arguments.MAX_PREFETCH
            ),
            "schedules": tuple(require_schedules(self.schedules)),
        }
        for field, value in checked.items():
            object.__setattr__(self, field, value)  # frozen: set once, here


def _listen_url(url: object) -> str | URL | None:
    if url is not None and not isinstance(url, str | URL):
        raise ValidationError(f"listen_url must be a URL, not {url!r}")
    return url
