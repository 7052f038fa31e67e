"""``dms worker --app module:attribute``: the job handlers of an application, loaded by name.

An app is a module attribute that is either a mapping of job kinds to handlers
(``handler(uow, job)``, run in the job tenant's :class:`~dms.uow.UnitOfWork`) or a callable
that takes the worker's blob store and returns one, as :func:`dms.processing.handlers` does.
The handlers of ``dms`` itself (:data:`BUILT_IN`) always come first; a kind that two apps
handle is refused, so that which handler runs is never a matter of order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dms.errors import ConfigurationError
from dms.jobs import Handler
from dms.storage import BlobStore
from dms.uow import UnitOfWork

#: The app of dms's own job kinds (verification and text extraction).
BUILT_IN = "dms.processing:handlers"


def load_handlers(apps: Sequence[str], store: BlobStore) -> dict[str, Handler[UnitOfWork]]:
    """The handlers of :data:`BUILT_IN` and of each of ``apps``, by kind.

    Raises :class:`~dms.errors.ConfigurationError` naming the app for a malformed name, a
    module that cannot be imported, a missing attribute, a value that is no app, or a kind
    that two apps handle.
    """
    handlers: dict[str, Handler[UnitOfWork]] = {}
    owners: dict[str, str] = {}
    for app in [BUILT_IN, *(a for a in apps if a != BUILT_IN)]:
        for kind, handler in _handlers_of(app, store).items():
            if kind in owners:
                raise ConfigurationError(
                    f"--app {app}: job kind {kind!r} is handled by {owners[kind]} already"
                )
            owners[kind] = app
            handlers[kind] = handler
    return handlers


def _handlers_of(app: str, store: BlobStore) -> Mapping[str, Handler[UnitOfWork]]:
    value = _attribute(app)
    if callable(value) and not isinstance(value, Mapping):
        value = _called(app, value, store)
    if not isinstance(value, Mapping) or not all(
        isinstance(kind, str) and callable(handler) for kind, handler in value.items()
    ):
        raise ConfigurationError(
            f"--app {app}: not a mapping of job kinds to handlers, nor a callable that takes "
            "the blob store and returns one"
        )
    return value


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
