"""Settings, resolved in one place from arguments and the environment.

They are resolved once, at an entry point (the ``dms`` command, :func:`dms.create_engine`, a
``Worker``), and travel with the engine: :func:`dms.create_engine` attaches them
(:func:`with_settings`), and code below reads them back from whatever engine or connection it
was given (:func:`settings_of`). Nothing else reads the environment.

==========================  ==========================================  ====================
variable                    meaning                                     default
==========================  ==========================================  ====================
``DMS_DATABASE_URL``        SQLAlchemy URL of the PostgreSQL database   embedded server
``DMS_DATA_DIR``            where the embedded server keeps its data    per-user data dir
``DMS_BLOBS``               blob store: a directory or ``s3://b/p``     a folder per database
``DMS_USERS_SCHEMA``        schema of the IAM service's ``users``       ``public``
``DMS_LOCK_TIMEOUT_MS``     ``lock_timeout`` of DDL transactions        ``5000``
``DMS_LOG_LEVEL``           level of the ``dms`` command's log lines    ``WARNING``
``DMS_LOG_FORMAT``          ``plain`` or ``json`` log lines             ``plain``
``DMS_AUDIT_SEAL_CRON``     when workers seal the audit trails, or off  ``* * * * *``
==========================  ==========================================  ====================
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from sqlalchemy.engine import Connection, Engine

from dms.errors import ConfigurationError
from dms.logs import LOG_FORMATS, LOG_LEVELS, LogFormat

#: The schema that holds what ``dms`` owns across tenants (registry, job queue).
SHARED_SCHEMA = "dms"

#: PostgreSQL's ``lock_timeout`` is an ``int`` of milliseconds: a larger value fails every use.
MAX_LOCK_TIMEOUT_MS = 2**31 - 1

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _default_data_dir(environ: Mapping[str, str]) -> Path:
    # XDG layout on every POSIX system: simple, predictable, and what operators look for.
    base = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dms"


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything ``dms`` reads from its environment."""

    database_url: str | None = None
    data_dir: Path = field(default_factory=lambda: _default_data_dir(os.environ))
    blobs: str | None = None
    """Where revisions' bytes live (:func:`dms.storage.store_of`); ``None``: per database."""
    users_schema: str = "public"
    lock_timeout_ms: int = 5000
    log_level: str = "WARNING"
    log_format: LogFormat = "plain"
    audit_seal_cron: str = "* * * * *"
    """When the workers seal every tenant's audit trail (:mod:`dms.sealing`); ``off``: never."""

    def __post_init__(self) -> None:
        """Reject settings that would only fail later, deep inside SQL."""
        self._check_types()
        # fullmatch: re.match with $ would let a trailing newline through. PostgreSQL reserves
        # pg_* schema names for itself.
        if not _IDENTIFIER.fullmatch(self.users_schema) or self.users_schema.startswith("pg_"):
            raise ConfigurationError(
                f"DMS_USERS_SCHEMA={self.users_schema!r} is not a plain lower-case schema name"
            )
        if not 0 < self.lock_timeout_ms <= MAX_LOCK_TIMEOUT_MS:
            raise ConfigurationError(
                f"DMS_LOCK_TIMEOUT_MS must be from 1 to {MAX_LOCK_TIMEOUT_MS}, "
                f"not {self.lock_timeout_ms}"
            )
        if self.log_level not in LOG_LEVELS:
            raise ConfigurationError(
                f"DMS_LOG_LEVEL={self.log_level!r} is not one of {', '.join(LOG_LEVELS)}"
            )
        if self.log_format not in LOG_FORMATS:
            raise ConfigurationError(
                f"DMS_LOG_FORMAT={self.log_format!r} is not one of {', '.join(LOG_FORMATS)}"
            )

    def _check_types(self) -> None:
        """Settings built in code: a value of the wrong type is named by its variable."""
        expected: dict[str, tuple[type, ...]] = {
            "database_url": (str, type(None)),
            "data_dir": (Path,),
            "blobs": (str, type(None)),
            "users_schema": (str,),
            "log_level": (str,),
            "log_format": (str,),
            "audit_seal_cron": (str,),
        }
        for name, types in expected.items():
            value = getattr(self, name)
            if not isinstance(value, types):
                raise ConfigurationError(f"DMS_{name.upper()} cannot be {value!r}")
        if isinstance(self.lock_timeout_ms, bool) or not isinstance(self.lock_timeout_ms, int):
            raise ConfigurationError(
                f"DMS_LOCK_TIMEOUT_MS must be an int, not {self.lock_timeout_ms!r}"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``environ`` (default: the process environment)."""
        env = os.environ if environ is None else environ
        timeout = env.get("DMS_LOCK_TIMEOUT_MS", "5000")
        try:
            lock_timeout_ms = int(timeout)
        except ValueError:
            raise ConfigurationError(f"DMS_LOCK_TIMEOUT_MS={timeout!r} is not an integer") from None
        data_dir = env.get("DMS_DATA_DIR")
        return cls(
            database_url=env.get("DMS_DATABASE_URL") or None,
            data_dir=Path(data_dir) if data_dir else _default_data_dir(env),
            blobs=env.get("DMS_BLOBS") or None,
            users_schema=env.get("DMS_USERS_SCHEMA", "public"),
            lock_timeout_ms=lock_timeout_ms,
            log_level=env.get("DMS_LOG_LEVEL", "WARNING").upper(),
            log_format=cast(LogFormat, env.get("DMS_LOG_FORMAT", "plain").lower()),
            audit_seal_cron=env.get("DMS_AUDIT_SEAL_CRON", "* * * * *").strip(),
        )


#: The execution option under which an engine carries its settings.
_SETTINGS_OPTION = "dms_settings"


def with_settings(engine: Engine, settings: Settings) -> Engine:
    """``engine`` (same pool) carrying ``settings`` to every connection it gives out."""
    return engine.execution_options(**{_SETTINGS_OPTION: settings})


def settings_of(bind: Engine | Connection) -> Settings:
    """The settings that ``bind`` carries; for an engine made without them, the environment's.

    Engines of :func:`dms.create_engine` carry theirs; one made with
    ``sqlalchemy.create_engine`` directly gets the environment's, read here and only here.
    """
    carried = bind.get_execution_options().get(_SETTINGS_OPTION)
    return carried if isinstance(carried, Settings) else Settings.from_env()
