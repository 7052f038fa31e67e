"""What the queue's own constraints mean when the database refuses one of its statements.

The reading of the driver's error (its constraint name, never its message) is
:mod:`dms.driver_errors`, shared with every layer; this module holds only the queue's
knowledge, for :func:`dms.driver_errors.refused`: any refusal not named here is a bug and goes
on as the driver's error.
"""

from __future__ import annotations

from collections.abc import Mapping

from dms.driver_errors import ErrorFactory
from dms.errors import NotMigrated, TenantNotFound

#: The foreign keys that tie a job and an idempotency key to a registered tenant.
TENANT_FOREIGN_KEYS = frozenset(
    {
        "fk_processing_jobs_tenant_tenants",
        "fk_job_idempotency_keys_tenant_tenants",
        "fk_job_schedules_tenant_tenants",
        "fk_job_limits_tenant_tenants",
    }
)
#: The CHECKs that name states: when one refuses a state this code knows, the table is older.
STATE_CONSTRAINTS = frozenset(
    {"ck_processing_jobs_state_known", "ck_processing_jobs_finished_when_terminal"}
)
#: A state refused by the table: its CHECK predates a state this code knows, so its schema is
#: behind the code.
STATE_UNKNOWN: Mapping[str, ErrorFactory] = dict.fromkeys(STATE_CONSTRAINTS, NotMigrated)


def tenant_dropped(message: str) -> Mapping[str, ErrorFactory]:
    """A tenant's foreign key refused: :class:`~dms.errors.TenantNotFound` saying ``message``.

    The statements check their tenants first; only a tenant dropped between that check and the
    write gets this far.
    """
    return dict.fromkeys(TENANT_FOREIGN_KEYS, lambda: TenantNotFound(message))
