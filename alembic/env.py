"""Alembic environment of dms: all the logic lives in :mod:`dms.migrations`."""

import logging
from logging.config import fileConfig
from typing import cast

from alembic.runtime.environment import EnvironmentContext

from alembic import context
from dms.migrations import run_from_alembic

config = context.config
# Only plain `alembic ...` configures logging: dms's own entry points pass attributes and keep
# the caller's logging as it is.
if config.config_file_name is not None and not config.attributes:
    if config.file_config.has_section("formatters"):
        fileConfig(config.config_file_name, disable_existing_loggers=False)
    else:
        # A minimal ini (only script_location, see docs/operations.md) still shows alembic's
        # progress lines, as the repository's alembic.ini does.
        logging.basicConfig(format="%(levelname)-5.5s [%(name)s] %(message)s")
        logging.getLogger("alembic").setLevel(logging.INFO)

# alembic.context is a module that proxies the current EnvironmentContext.
run_from_alembic(cast(EnvironmentContext, context))
