"""What every ``dms`` command gets: the settings, resolved once, and an engine on first use."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from dms.config import Settings
from dms.db import create_engine
from dms.storage import BlobStore, store_of

#: Exit statuses: success, an operator error or unhealthy state, bad arguments (argparse).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


@dataclass(kw_only=True)
class Context:
    """The settings of this run, and the engine, created when a command first needs it.

    Commands that never touch the database (``dms server status``, ``dms alembic --help``)
    then never start the embedded server.
    """

    settings: Settings
    database_url: str | None = None
    _engine: Engine | None = field(default=None, init=False)

    @property
    def engine(self) -> Engine:
        """The engine of ``--database-url``, else ``DMS_DATABASE_URL``, else the embedded server."""
        if self._engine is None:
            self._engine = create_engine(self.database_url, settings=self.settings)
        return self._engine

    def engine_with(self, **options: Any) -> Engine:
        """The engine, created with ``options`` for :func:`sqlalchemy.create_engine`.

        For a command that needs a pool of its own shape (``dms worker``); it must be the
        command's first use of the engine.
        """
        if self._engine is not None:
            raise RuntimeError("the engine was created already: ask for its options first")
        self._engine = create_engine(self.database_url, settings=self.settings, **options)
        return self._engine

    def store(self, location: str | None) -> BlobStore:
        """The blob store at ``location`` (``--blobs``), else the database's default."""
        return store_of(self.engine, location)

    def close(self) -> None:
        """Dispose of the engine, if one was made."""
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


#: A command: reads its arguments, does its work, prints, returns the exit status.
Command = Callable[[Context, argparse.Namespace], int]
