"""Alembic environment of dms: all the logic lives in :mod:`dms.migrations`."""

from logging.config import fileConfig
from typing import cast

from alembic.runtime.environment import EnvironmentContext

from alembic import context
from dms.migrations import run_from_alembic

if context.config.config_file_name is not None and not context.config.attributes:
    fileConfig(context.config.config_file_name, disable_existing_loggers=False)

# alembic.context is a module that proxies the current EnvironmentContext.
run_from_alembic(cast(EnvironmentContext, context))
