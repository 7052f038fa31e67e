"""The arguments every fleet operation shares, checked before any SQL.

Each raises :class:`~dms.errors.ValidationError`. A ``str`` is an iterable of its letters, so
without :func:`check_names` ``drop_tenants(engine, "am")`` would drop tenants ``a`` and ``m``;
a ``jobs`` that is not a positive ``int`` would otherwise fail late, with a raw ``TypeError``,
or run in this process as if it were 1.
"""

from __future__ import annotations

from collections.abc import Iterable

from dms.domain.validation import shown
from dms.errors import ValidationError


def check_jobs(jobs: object) -> int | None:
    """Return ``jobs`` if it is ``None`` (the default) or an ``int`` of at least 1."""
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise ValidationError(f"jobs must be a positive int or None, not {shown(jobs)}")
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
