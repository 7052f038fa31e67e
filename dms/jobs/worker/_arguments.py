"""The checks of a worker's arguments: each refused with :class:`~dms.errors.ValidationError`.

A worker checks everything it is given when it is made, before any SQL runs or any thread
starts: a name or kind that PostgreSQL cannot store (NUL, lone surrogates), a value of the
wrong type, an absurd size. The limits are documented constants.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Collection, Mapping
from datetime import timedelta

from dms.errors import ValidationError
from dms.jobs.backoff import Backoff
from dms.jobs.validation import validate_lease

#: Most runner threads of one worker: beyond it, run more worker processes.
MAX_CONCURRENCY = 1024
#: Most jobs per claim or completion statement.
MAX_BATCH_SIZE = 10_000
#: Most jobs claimed ahead of the runners.
MAX_PREFETCH = 100_000
#: Shortest lease of a worker: it renews leases every third of it.
MIN_LEASE = timedelta(seconds=1)
#: Longest poll interval and grace period, in seconds: a day.
MAX_SECONDS = 86_400.0
#: Longest worker name or job kind, in characters (the queue's limit on names).
MAX_NAME_CHARS = 200


def count(field: str, value: object, *, minimum: int, maximum: int) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) from ``minimum`` to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValidationError(
            f"{field} must be an integer from {minimum} to {maximum}, not {value!r}"
        )
    return value


def seconds(field: str, value: object, *, positive: bool) -> float:
    """``value`` as seconds: a finite real number, above zero if ``positive``, at most a day."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
        or value > MAX_SECONDS
    ):
        bound = "above 0" if positive else "at least 0"
        raise ValidationError(
            f"{field} must be a number of seconds {bound} and at most {MAX_SECONDS:g}, "
            f"not {value!r}"
        )
    return float(value)


def name(field: str, value: object) -> str:
    """``value`` if it is a non-blank string PostgreSQL can store, of a sensible length."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_CHARS:
        raise ValidationError(
            f"{field} must be a non-blank string of at most {MAX_NAME_CHARS} characters, "
            f"not {value!r}"
        )
    if "\x00" in value:
        raise ValidationError(f"{field} contains U+0000, which PostgreSQL cannot store: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(
            f"{field} contains a lone surrogate, which is not text: {value!r}"
        ) from None
    return value


def kinds(value: object) -> tuple[str, ...]:
    """A collection of kind names, sorted, without duplicates (a bare string is refused)."""
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        raise ValidationError(f"kinds must be a collection of kind names, not {value!r}")
    return tuple(sorted({name("kind", kind) for kind in value}))


def handlers(value: object) -> dict[str, object]:
    """A mapping of kind names to callables."""
    if not isinstance(value, Mapping):
        raise ValidationError(f"handlers must map job kinds to callables, not {value!r}")
    checked = {name("handler kind", kind): handler for kind, handler in value.items()}
    if not all(callable(handler) for handler in checked.values()):
        raise ValidationError("every handler must be callable")
    return checked


def async_kinds(handlers: Mapping[str, object]) -> frozenset[str]:
    """The kinds whose handler is an ``async def`` function (run on the worker's event loop)."""
    return frozenset(kind for kind, handler in handlers.items() if _is_coroutine_function(handler))


def _is_coroutine_function(handler: object) -> bool:
    # A callable object's __call__ counts: inspect looks at functions and partials only.
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - the method itself, not callability
    )


def backoffs(value: object) -> dict[str, Backoff]:
    """A mapping of kind names to :class:`~dms.jobs.Backoff` policies (``None``: empty)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(b, Backoff) for b in value.values()):
        raise ValidationError(f"backoff must map job kinds to Backoff policies, not {value!r}")
    return {name("backoff kind", kind): policy for kind, policy in value.items()}


def lease(value: object) -> timedelta:
    """A lease from :data:`MIN_LEASE` to the queue's longest."""
    checked = validate_lease(value)
    if checked < MIN_LEASE:
        raise ValidationError(f"a worker's lease must be at least {MIN_LEASE}, not {checked}")
    return checked


def handlers_fit(handlers: Mapping[str, object], unit: type) -> None:
    """Refuse a handler whose first parameter is annotated with a class ``unit`` is not.

    A handler written for the document layer's ``UnitOfWork`` (``uow.revisions``...) given to
    a worker that passes a bare transaction would fail every job with an ``AttributeError``;
    it is refused here instead. Handlers whose annotation cannot be read or is no class
    (``Any``, a protocol, a name that does not resolve) are taken on trust.
    """
    for kind, handler in handlers.items():
        wanted = _first_parameter_class(handler)
        if wanted is not None and not _is_subclass(unit, wanted):
            raise ValidationError(
                f"the handler of job kind {kind!r} takes a {wanted.__name__}, and this worker "
                f"gives each handler a {unit.__name__}: use dms.DocumentWorker (the tenant's "
                "UnitOfWork), or pass unit_of_work= a factory of what the handler takes"
            )


def _first_parameter_class(handler: object) -> type | None:
    try:
        parameters = list(inspect.signature(handler).parameters.values())  # type: ignore[arg-type]
        hints = typing.get_type_hints(handler)
    except (TypeError, ValueError, NameError, AttributeError):
        return None
    if not parameters:
        return None
    wanted = hints.get(parameters[0].name)
    # Any is a class since Python 3.11: it, like object, takes whatever it is given.
    if wanted is typing.Any or wanted is object or not isinstance(wanted, type):
        return None
    return wanted


def _is_subclass(unit: type, wanted: type) -> bool:
    try:
        return issubclass(unit, wanted)
    except TypeError:  # a protocol that is not runtime-checkable: taken on trust
        return True
