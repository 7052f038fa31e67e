"""Alembic environment of dms: all the logic lives in :mod:`dms.migrations`."""

from logging.config import fileConfig

from alembic import context

from dms.migrations import run_from_alembic

if context.config.config_file_name is not None and not context.config.attributes:
    fileConfig(context.config.config_file_name, disable_existing_loggers=False)

run_from_alembic(context)
