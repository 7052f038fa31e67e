"""The curated public API: ``dms.__all__`` is sorted, resolves, and changes only on purpose."""

from __future__ import annotations

import importlib

import pytest

import dms

EXPECTED = [
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

PACKAGES = [
    "dms",
    "dms.cli",
    "dms.domain",
    "dms.importing",
    "dms.jobs",
    "dms.services",
    "dms.testing",
]


def test_dms_exports_exactly_the_expected_names() -> None:
    assert dms.__all__ == EXPECTED


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_sorted_unique_and_resolves(package: str) -> None:
    module = importlib.import_module(package)
    names = list(module.__all__)
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_documented(package: str) -> None:
    module = importlib.import_module(package)
    undocumented = [
        name
        for name in module.__all__
        if callable(getattr(module, name)) and not getattr(module, name).__doc__
    ]
    assert undocumented == []
