"""dms: the core of a multi-tenant document-management backend on PostgreSQL.

Start with :func:`create_engine`, :func:`create_tenant` and :func:`upgrade`; every error is a
:class:`DmsError`.
"""

from dms.config import Settings
from dms.db import create_engine
from dms.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    ConfigurationError,
    DmsError,
    InvalidTenantName,
    InvariantViolation,
    LeaseLost,
    MigrationError,
    MigrationFailed,
    NotFound,
    TenantExists,
    TenantNotFound,
    UsersTableMissing,
    ValidationError,
)
from dms.migrations import downgrade, fleet_status, upgrade
from dms.tenancy import Tenant, create_tenant, drop_tenant, list_tenants

__all__ = [
    "AlreadyExists",
    "ConcurrentUpdate",
    "ConfigurationError",
    "DmsError",
    "InvalidTenantName",
    "InvariantViolation",
    "LeaseLost",
    "MigrationError",
    "MigrationFailed",
    "NotFound",
    "Settings",
    "Tenant",
    "TenantExists",
    "TenantNotFound",
    "UsersTableMissing",
    "ValidationError",
    "create_engine",
    "create_tenant",
    "downgrade",
    "drop_tenant",
    "fleet_status",
    "list_tenants",
    "upgrade",
]
