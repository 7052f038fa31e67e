"""Drift: every tenant's catalog against what head declares.

What head declares is what the migrations build: :func:`check_drift` builds a tenant at head
in a throw-away schema, inside a transaction that it rolls back (so it needs the privileges of
creating a tenant, and holds the SHARE ROW EXCLUSIVE lock on ``users`` of the foreign keys for
a moment), and reads its catalog (:mod:`.catalog`). Then every registered tenant at head is
compared with it by digest, a few hundred tenants per query; only those that differ are read
object by object to say what differs: an object missing, unexpected, or defined otherwise.
A tenant not at head is reported as such, not compared.

The registry's copy of each tenant's revision (:mod:`.registry`), which ``dms status`` and the
fleet runner trust, is checked against the schema's own version table too: a tenant whose copy
differs is reported (``registry records ...``), with the command that corrects it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy.engine import Connection, Engine
from sqlalchemy.schema import CreateSchema

from dms import roles, tenancy
from dms.config import settings_of
from dms.fleet.progress import NoProgress, Progress
from dms.migrations.catalog import (
    CatalogRow,
    fingerprints,
    fleet_fingerprints,
    rows,
    schemas_searching_slowly,
)
from dms.migrations.schema_step import migrate_schema
from dms.migrations.scope import MigrationScope
from dms.migrations.scripts import Scripts
from dms.migrations.status import (
    read_fleet_versions,
    registered_schemas,
    tenant_schemas_in_catalog,
)
from dms.roles import PrivilegeProblem

Change = Literal["missing", "unexpected", "differs"]


@dataclass(frozen=True, kw_only=True)
class Difference:
    """One object that is not as head declares it."""

    kind: str
    """``table``, ``column``, ``constraint``, ``index``, ``trigger`` or ``function``."""
    name: str
    """``documents.ix_documents_folder_id``, ``folders_guard()``, ..."""
    change: Change
    expected: str | None
    found: str | None

    def describe(self) -> str:
        """One line: ``index documents.ix_x: missing``."""
        return f"{self.kind} {self.name}: {self.change}"


@dataclass(frozen=True, kw_only=True)
class TenantDrift:
    """A tenant that is not as head declares: behind (or ahead), missing, or different."""

    tenant: str
    revision: str | None
    problem: str
    """``differs from head``, ``at 0002, not at head``, ``schema missing``."""
    differences: tuple[Difference, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DriftReport:
    """The outcome of :func:`check_drift`."""

    head: str
    checked: int
    drifted: tuple[TenantDrift, ...]
    seconds: float
    searching_slowly: tuple[str, ...] = ()
    """Tenants whose search functions' owner is held to row-level security (not drift: their
    searches are right, but a user's read every document instead of an index)."""
    privileges: tuple[PrivilegeProblem, ...] = ()
    """Each privilege an application role (``dms roles setup``) lacks or holds in excess."""

    @property
    def clean(self) -> bool:
        """Whether every tenant is exactly as head declares, and granted exactly as needed."""
        return not self.drifted and not self.privileges

    def as_json(self) -> dict[str, Any]:
        """``dms check --json``."""
        return {
            "head": self.head,
            "checked": self.checked,
            "seconds": round(self.seconds, 3),
            "searching_slowly": list(self.searching_slowly),
            "privileges": [
                {
                    "role": p.role,
                    "schema": p.schema,
                    "table": p.table,
                    "privilege": p.privilege,
                    "missing": p.missing,
                }
                for p in self.privileges
            ],
            "drifted": [
                {
                    "tenant": drift.tenant,
                    "revision": drift.revision,
                    "problem": drift.problem,
                    "differences": [
                        {
                            "kind": d.kind,
                            "name": d.name,
                            "change": d.change,
                            "expected": d.expected,
                            "found": d.found,
                        }
                        for d in drift.differences
                    ],
                }
                for drift in self.drifted
            ],
        }


def check_drift(
    engine: Engine, *, progress: Progress | None = None, scripts: Scripts | None = None
) -> DriftReport:
    """Compare every registered tenant's catalog with a tenant built at head."""
    started = time.perf_counter()
    progress = progress or NoProgress()
    scripts = scripts or Scripts.default()
    head = scripts.head()
    with engine.connect() as conn:
        reference = _reference(conn, scripts)
        by_schema = registered_schemas(conn)
        present = tenant_schemas_in_catalog(conn)
        recorded = tenancy.recorded_revisions(conn)
    versions = read_fleet_versions(engine, sorted(by_schema))
    comparable = [s for s in sorted(by_schema) if s in present and versions[s] == head]
    progress.begin(len(by_schema))
    progress.advance(steps=len(by_schema) - len(comparable))
    digests = fleet_fingerprints(engine, comparable, progress=progress)
    progress.end()
    with engine.connect() as conn:
        drifted = [
            _differences(conn, by_schema[schema], head, reference)
            for schema in comparable
            if digests[schema] != reference.digest
        ]
        slow = schemas_searching_slowly(conn, sorted(s for s in by_schema if s in present))
        privileges = roles.problems(conn, sorted(s for s in by_schema if s in present))
    others = [
        _elsewhere(by_schema[schema], versions[schema], head, schema in present)
        for schema in sorted(by_schema)
        if schema not in present or versions[schema] != head
    ]
    return DriftReport(
        head=head,
        checked=len(by_schema),
        drifted=_with_registry([*drifted, *others], by_schema, versions, recorded or {}, present),
        seconds=time.perf_counter() - started,
        searching_slowly=tuple(sorted(by_schema[schema] for schema in slow)),
        privileges=tuple(privileges),
    )


def _with_registry(
    drifted: list[TenantDrift],
    by_schema: dict[str, str],
    versions: dict[str, str | None],
    recorded: dict[str, str | None],
    present: set[str],
) -> tuple[TenantDrift, ...]:
    """``drifted``, plus (or merged into a tenant's entry) every registry copy that is wrong."""
    by_tenant = {drift.tenant: drift for drift in drifted}
    for schema, slug in by_schema.items():
        if schema not in recorded or schema not in present:
            continue
        if recorded[schema] == versions[schema]:
            continue
        wrong = (
            f"registry records {recorded[schema] or 'base'}, the schema is at "
            f"{versions[schema] or 'base'}: run dms migrate --tenant {slug}"
        )
        found = by_tenant.get(slug)
        by_tenant[slug] = TenantDrift(
            tenant=slug,
            revision=versions[schema],
            problem=wrong if found is None else f"{found.problem}; {wrong}",
            differences=() if found is None else found.differences,
        )
    return tuple(sorted(by_tenant.values(), key=lambda d: d.tenant))


@dataclass(frozen=True)
class _Reference:
    rows: tuple[CatalogRow, ...]
    digest: str


def _reference(conn: Connection, scripts: Scripts) -> _Reference:
    """A tenant built at head in a schema of its own, read, then rolled back."""
    schema = f"dms_reference_{uuid.uuid4().hex[:12]}"
    settings = settings_of(conn)
    with conn.begin() as transaction:
        tenancy.set_lock_timeout(conn, settings)
        conn.execute(CreateSchema(schema))
        scope = MigrationScope.tenant(schema, settings)
        migrate_schema(conn, scope, scripts.head(), "upgrade", scripts)
        reference = _Reference(rows(conn, schema), fingerprints(conn, [schema])[schema])
        transaction.rollback()
    return reference


def _differences(conn: Connection, slug: str, head: str, reference: _Reference) -> TenantDrift:
    expected = {(row.kind, row.name): row.definition for row in reference.rows}
    found = {(row.kind, row.name): row.definition for row in rows(conn, tenancy.schema_name(slug))}
    differences = [
        Difference(
            kind=kind,
            name=name,
            change=_change(expected.get((kind, name)), found.get((kind, name))),
            expected=expected.get((kind, name)),
            found=found.get((kind, name)),
        )
        for kind, name in sorted(expected.keys() | found.keys())
        if expected.get((kind, name)) != found.get((kind, name))
    ]
    return TenantDrift(
        tenant=slug, revision=head, problem="differs from head", differences=tuple(differences)
    )


def _change(expected: str | None, found: str | None) -> Change:
    if found is None:
        return "missing"
    return "unexpected" if expected is None else "differs"


def _elsewhere(slug: str, revision: str | None, head: str, present: bool) -> TenantDrift:
    if not present:
        return TenantDrift(tenant=slug, revision=None, problem="schema missing")
    return TenantDrift(
        tenant=slug,
        revision=revision,
        problem=f"at {revision or 'base'}, not at head {head}: run dms migrate",
    )
