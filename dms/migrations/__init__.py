"""Alembic migrations of the shared schema and of every tenant schema, up and down.

One chain of revisions; each revision has a shared part and a tenant part
(``upgrade(scope=...)`` looks at :attr:`MigrationScope.kind`). The shared schema and every
tenant schema keep their own ``alembic_version`` table, so each moves on its own:

* the shared schema ``dms`` migrates first on the way up and last on the way down, in its own
  transaction;
* each registered tenant migrates in its own transaction under a per-tenant advisory lock and
  ``lock_timeout``, on ``jobs`` worker processes. A failing tenant rolls back alone and is
  reported (:class:`~dms.errors.MigrationFailed`) while the others go on; two concurrent runs
  serialise per tenant instead of colliding; an interrupted run leaves every tenant at its old
  revision or at the target, and the same call finishes the rest;
* tenants already at the target are skipped after one query of the registry, which keeps a
  copy of every tenant's revision (:mod:`.registry`), so a no-op run over 10,000 tenants takes
  seconds.

Modules by role: :mod:`.scripts` (where the revisions are; targets resolved up front),
:mod:`.status` (reading revisions, the fleet's status), :mod:`.registry` (the registry's copy
of each tenant's revision, written with the schema's own), :mod:`.schema_step` (one schema on
one connection), :mod:`.runner` (the fleet), :mod:`.alembic_env` (``alembic/env.py``),
:mod:`.catalog` and :mod:`.drift` (what each tenant's catalog holds, against head).
"""

from dms.fleet.sizing import default_jobs
from dms.migrations.alembic_env import run_from_alembic
from dms.migrations.runner import downgrade, downgrade_target, upgrade
from dms.migrations.schema_step import migrate_schema
from dms.migrations.scope import MigrationScope
from dms.migrations.scripts import Scripts, alembic_config, head_revision, script_location
from dms.migrations.status import FleetStatus, SchemaStatus, fleet_status, read_versions
from dms.users import require_users_table

__all__ = [
    "FleetStatus",
    "MigrationScope",
    "SchemaStatus",
    "Scripts",
    "alembic_config",
    "default_jobs",
    "downgrade",
    "downgrade_target",
    "fleet_status",
    "head_revision",
    "migrate_schema",
    "read_versions",
    "require_users_table",
    "run_from_alembic",
    "script_location",
    "upgrade",
]
