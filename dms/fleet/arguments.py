"""The arguments every fleet operation shares, checked before any SQL.

Each raises :class:`~dms.errors.ValidationError`. A ``str`` is an iterable of its letters, so
without :func:`check_names` ``drop_tenants(engine, "am")`` would drop tenants ``a`` and ``m``;
a ``jobs`` that is not a positive ``int`` would otherwise fail late, with a raw ``TypeError``,
or run in this process as if it were 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Literal

from dms.domain.validation import shown
from dms.errors import ValidationError

#: ``jobs=AUTO_JOBS``: as many worker processes as the number of tenants calls for
#: (:func:`dms.migrations.default_jobs`), what the ``dms`` command and plain ``alembic`` do.
#: A library call's default is this process alone: more processes are started with
#: ``spawn``, which imports the caller's main module again in each, so a script needs its
#: ``if __name__ == "__main__":`` guard for them, and only the caller can know it has one.
AUTO_JOBS: Final = "auto"
#: Worker processes of a fleet operation: a number, :data:`AUTO_JOBS`, or ``None`` (one: this
#: process).
Jobs = int | Literal["auto"] | None


def check_jobs(jobs: object) -> Jobs:
    """Return ``jobs`` if it is ``None`` (the default), :data:`AUTO_JOBS` or an ``int`` >= 1."""
    if jobs is None or jobs == AUTO_JOBS:
        return None if jobs is None else AUTO_JOBS
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValidationError(
            f"jobs must be a positive int, {AUTO_JOBS!r} or None, not {shown(jobs)}"
        )
    return jobs


def check_names(names: object) -> list[object]:
    """Return the items of ``names``: any iterable of tenant names, but not one string.

    The items themselves are the operation's to judge: a bad name fails alone, in its report.
    """
    if isinstance(names, (str, bytes)) or not isinstance(names, Iterable):
        raise ValidationError(
            f"tenant names must be an iterable of names (a list), not {shown(names)}"
        )
    return list(names)
