"""An :class:`App`: the job handlers and the periodic jobs that a worker process runs.

``dms worker --app module:attribute`` loads apps (:mod:`dms.cli.apps`); in code, give a
worker an app's parts: ``Worker(engine, app.handlers, WorkerConfig(schedules=app.schedules))``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dms.jobs.schedules import Schedule, require_schedules
from dms.jobs.worker import Handler
from dms.jobs.worker import _arguments as arguments


@dataclass(frozen=True)
class App:
    """Handlers by job kind, and the schedules that enqueue jobs of theirs (or of others).

    Raises :class:`~dms.errors.ValidationError` for a handler that is not callable, a kind that
    is not a name, or schedules that are not :class:`~dms.jobs.Schedule` values of distinct
    names.
    """

    handlers: Mapping[str, Handler[Any]]
    schedules: Sequence[Schedule] = field(default=())

    def __post_init__(self) -> None:
        """Check both parts before any worker is built with them."""
        arguments.handlers(self.handlers)
        object.__setattr__(self, "schedules", tuple(require_schedules(self.schedules)))
