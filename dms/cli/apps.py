"""``dms worker --app module:attribute``: an application's job handlers and schedules, by name.

An app is a module attribute that is a :class:`~dms.jobs.App` (handlers and schedules), a
mapping of job kinds to handlers (``handler(uow, job)``, run in the job tenant's
:class:`~dms.uow.UnitOfWork`), or a callable that takes the worker's blob store and returns
either, as :func:`dms.processing.handlers` does. The handlers of ``dms`` itself
(:data:`BUILT_IN`) always come first; a kind that two apps handle, or a schedule name that two
apps use, is refused, so that what runs is never a matter of order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dms.errors import ConfigurationError, ValidationError
from dms.jobs import App, Handler, Schedule
from dms.storage import BlobStore
from dms.uow import UnitOfWork

#: The app of dms's own job kinds (verification, text extraction, the audit trail's sealing).
BUILT_IN = "dms.processing:handlers"


def load_apps(apps: Sequence[str], store: BlobStore) -> App:
    """The handlers and schedules of :data:`BUILT_IN` and of each of ``apps``, as one app.

    Raises :class:`~dms.errors.ConfigurationError` naming the app for a malformed name, a
    module that cannot be imported, a missing attribute, a value that is no app, or a kind or
    schedule name that two apps claim.
    """
    handlers: dict[str, Handler[UnitOfWork]] = {}
    schedules: dict[str, Schedule] = {}
    owners: dict[str, str] = {}
    for name in [BUILT_IN, *(a for a in apps if a != BUILT_IN)]:
        app = _app(name, store)
        for kind, handler in app.handlers.items():
            _claim(owners, f"job kind {kind!r} is handled", name)
            handlers[kind] = handler
        for schedule in app.schedules:
            _claim(owners, f"schedule {schedule.name!r} is defined", name)
            schedules[schedule.name] = schedule
    return App(handlers, tuple(schedules.values()))


def _claim(owners: dict[str, str], what: str, app: str) -> None:
    """Record that ``app`` owns ``what`` (``job kind 'x' is handled``), refused if one does."""
    if what in owners:
        raise ConfigurationError(f"--app {app}: {what} by {owners[what]} already")
    owners[what] = app


def _app(name: str, store: BlobStore) -> App:
    value = _attribute(name)
    if callable(value) and not isinstance(value, Mapping | App):
        value = _called(name, value, store)
    if isinstance(value, App):
        return value
    if not isinstance(value, Mapping) or not all(
        isinstance(kind, str) and callable(handler) for kind, handler in value.items()
    ):
        raise ConfigurationError(
            f"--app {name}: not a dms.jobs.App, a mapping of job kinds to handlers, nor a "
            "callable that takes the blob store and returns one"
        )
    try:
        return App(value)
    except ValidationError as exc:
        raise ConfigurationError(f"--app {name}: {exc}") from exc


def _attribute(app: str) -> Any:
    module_name, _, attribute = app.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"--app {app}: write it module:attribute (myapp.jobs:handlers)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"--app {app}: cannot import {module_name}: {exc}") from exc
    value: Any = module
    for name in attribute.split("."):
        try:
            value = getattr(value, name)
        except AttributeError:
            raise ConfigurationError(f"--app {app}: {module_name} has no {attribute}") from None
    return value


def _called(app: str, factory: Callable[..., Any], store: BlobStore) -> Any:
    try:
        return factory(store)
    except TypeError as exc:
        raise ConfigurationError(
            f"--app {app}: calling it with the blob store failed: {exc}"
        ) from exc
