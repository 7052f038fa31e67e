"""dms: the core of a multi-tenant document-management backend on PostgreSQL.

Start with :func:`create_engine`, :func:`create_tenant` and :func:`upgrade`; then work in a
tenant through a :class:`UnitOfWork` (``uow.documents``, ``uow.folders``, ``uow.tags``,
``uow.revisions``, ``uow.metadata``) and the use cases in :mod:`dms.services`. Every error is a
:class:`DmsError`.
"""

from dms.audit import (
    export_audit_trail,
    prune_audit_trail,
    seal_audit_trail,
    verify_audit_trail,
)
from dms.config import Settings
from dms.db import create_async_engine, create_engine
from dms.domain import (
    Cursor,
    Document,
    DocumentQuery,
    FieldOption,
    FieldType,
    Folder,
    MetadataField,
    MetadataFilter,
    Page,
    Revision,
    Snippet,
    Tag,
)
from dms.domain.access import ALL_RIGHTS, AccessEntry, Group, Rights
from dms.errors import (
    AlreadyExists,
    ClusterError,
    ConcurrentUpdate,
    ConfigurationError,
    DmsError,
    FleetInterrupted,
    FleetStopped,
    InvalidTenantName,
    InvariantViolation,
    LeaseLost,
    MigrationError,
    MigrationFailed,
    NotFound,
    NotMigrated,
    PermissionDenied,
    TenantExists,
    TenantNotFound,
    TransactionFailed,
    UsersTableMissing,
    ValidationError,
)
from dms.jobs import Job, JobState, WorkerConfig
from dms.migrations import downgrade, fleet_status, upgrade
from dms.placement import move_tenant, tenant_nodes
from dms.provisioning import create_tenant, create_tenants, drop_tenant, drop_tenants
from dms.tenancy import Tenant, list_tenants
from dms.uow import UnitOfWork
from dms.worker import DocumentWorker

__all__ = [
    "ALL_RIGHTS",
    "AccessEntry",
    "AlreadyExists",
    "ClusterError",
    "ConcurrentUpdate",
    "ConfigurationError",
    "Cursor",
    "DmsError",
    "Document",
    "DocumentQuery",
    "DocumentWorker",
    "FieldOption",
    "FieldType",
    "FleetInterrupted",
    "FleetStopped",
    "Folder",
    "Group",
    "InvalidTenantName",
    "InvariantViolation",
    "Job",
    "JobState",
    "LeaseLost",
    "MetadataField",
    "MetadataFilter",
    "MigrationError",
    "MigrationFailed",
    "NotFound",
    "NotMigrated",
    "Page",
    "PermissionDenied",
    "Revision",
    "Rights",
    "Settings",
    "Snippet",
    "Tag",
    "Tenant",
    "TenantExists",
    "TenantNotFound",
    "TransactionFailed",
    "UnitOfWork",
    "UsersTableMissing",
    "ValidationError",
    "WorkerConfig",
    "create_async_engine",
    "create_engine",
    "create_tenant",
    "create_tenants",
    "downgrade",
    "drop_tenant",
    "drop_tenants",
    "export_audit_trail",
    "fleet_status",
    "list_tenants",
    "move_tenant",
    "prune_audit_trail",
    "seal_audit_trail",
    "tenant_nodes",
    "upgrade",
    "verify_audit_trail",
]
