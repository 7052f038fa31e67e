"""Driver errors of the queue's statements, read by constraint name (never by message text).

:mod:`dms.repositories.errors` does this for the tenant tables; the queue sits below the
repositories and reads the one detail it needs itself.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

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


def constraint_of(exc: DBAPIError) -> str:
    """The name of the constraint the statement violated ('' if none), from psycopg's diag."""
    diag = getattr(exc.orig, "diag", None)
    return str(getattr(diag, "constraint_name", None) or "")
