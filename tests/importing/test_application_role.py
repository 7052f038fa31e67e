"""An import through the application's role, as deployed: under row-level security (issue 43).

The suite's own engine is a superuser, which row-level security never applies to; these tests
import through :func:`dms.testing.roles.application_engine` (no superuser, no BYPASSRLS), as
docs/access.md asks of a deployment. A revision's policy sees only documents that its
statement's snapshot sees: an import that inserted a document and its revision in one
statement was refused there (``new row violates row-level security policy for table
"file_revisions"``) and passed as a superuser.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import citus, tenancy
from dms.cli import main
from dms.domain.access import ALL_RIGHTS
from dms.importing import import_tree
from dms.schema import tenant as t
from dms.storage import LocalBlobStore
from dms.uow import UnitOfWork
from tests.importing.conftest import digest, imported_files, source_files


def _small_tree(base: Path) -> Path:
    """Three folders (one nested) and five files, two of them with the same bytes."""
    root = base / "share"
    for path, data in {
        "a.txt": b"top level\n",
        "docs/b.md": b"# B\n",
        "docs/same.txt": b"the same bytes\n",
        "docs/deeper/c.bin": bytes(range(256)),
        "other/same.txt": b"the same bytes\n",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    return root


@pytest.fixture
def small_tree(tmp_path: Path) -> Path:
    """A few folders and files (see :func:`_small_tree`)."""
    return _small_tree(tmp_path / "source")


@dataclass(frozen=True)
class AsApplication:
    """What a test imports with: the application role's engine, the tenant, the user who
    imports (every right at the root, and nobody else any) and the tree."""

    engine: Engine
    tenant: str
    admin: uuid.UUID
    tree: Path


@pytest.fixture
def app(app_engine: Engine, tenant: str, user_id: uuid.UUID, small_tree: Path) -> AsApplication:
    """The tenant closed to everyone but ``user_id``, by an operator (everyone's entry at the
    root revoked): the import's reads and writes pass the policies by that user's rights."""
    with UnitOfWork(app_engine, tenant=tenant, system="tests") as uow:
        uow.access.grant(ALL_RIGHTS, user_id=user_id)
        uow.access.revoke()
        assert [e.user_id for e in uow.access.entries()] == [user_id]
        uow.commit()
    return AsApplication(engine=app_engine, tenant=tenant, admin=user_id, tree=small_tree)


def _check_imported(engine: Engine, app: AsApplication) -> None:
    """Every file of the tree arrived once, with its bytes' digest, as a document of the admin
    pointing at its first revision (at version 2), each recorded as created by the admin in the
    audit trail and, off Citus, never updated (created pointing at its revision, the key
    deferred; on Citus an update points it there), and each content's blob registered once
    (read as the superuser: ``engine``)."""
    expected = source_files(app.tree)
    imported = imported_files(engine, app.tenant)
    base = os.fsencode(app.tree.parent)
    assert {os.path.relpath(p, base) for p in imported} == set(expected)
    for path, (_title, sha256, size, _key, _mime) in imported.items():
        data = expected[os.path.relpath(path, base)]
        assert (sha256, size) == (digest(data), len(data))
    d, r, e = t.documents, t.file_revisions, t.audit_events
    with engine.connect() as conn:
        routed = tenancy.route(conn, app.tenant)
        owners = set(routed.scalars(sa.select(d.c.owner_id).distinct()))
        versions = set(routed.scalars(sa.select(d.c.version).distinct()))
        numbers = set(routed.scalars(sa.select(r.c.revision_no).distinct()))
        revised = routed.scalar(
            sa.select(sa.func.count())
            .select_from(d)
            .join(r, sa.and_(r.c.id == d.c.current_revision_id, r.c.document_id == d.c.id))
        )
        recorded = {
            (kind, action): count
            for kind, action, count in routed.execute(
                sa.select(e.c.object_type, e.c.action, sa.func.count())
                .where(e.c.actor_id == app.admin, e.c.object_type.in_(["document", "revision"]))
                .group_by(e.c.object_type, e.c.action)
            )
        }
        blobs = routed.scalar(sa.select(sa.func.count()).select_from(t.blobs))
        pointed_by_update = citus.is_citus(conn)
    assert owners == {app.admin}
    assert versions == {2}
    assert numbers == {1}
    assert revised == len(expected)
    assert recorded == {
        ("document", "create"): len(expected),
        ("revision", "create"): len(expected),
        **({("document", "update"): len(expected)} if pointed_by_update else {}),
    }
    assert blobs == len(set(expected.values()))


def test_import_tree_through_the_application_role(
    engine: Engine, app: AsApplication, store: LocalBlobStore
) -> None:
    report = import_tree(
        app.engine, app.tree, tenant=app.tenant, user_id=app.admin, store=store, batch_files=2
    )

    assert report.complete
    assert report.counts.batches == 3
    assert report.counts.documents_created == len(source_files(app.tree))
    _check_imported(engine, app)


def test_a_changed_file_gets_a_new_revision_through_the_application_role(
    engine: Engine, app: AsApplication, store: LocalBlobStore
) -> None:
    """Resuming reads the provenance and adds revisions to known documents, under the
    policies too."""
    import_tree(app.engine, app.tree, tenant=app.tenant, user_id=app.admin, store=store)
    changed = app.tree / "docs" / "b.md"
    changed.write_bytes(b"# B, changed\n")

    again = import_tree(app.engine, app.tree, tenant=app.tenant, user_id=app.admin, store=store)

    assert (again.counts.documents_created, again.counts.revisions_added) == (0, 1)
    assert again.counts.unchanged == len(source_files(app.tree)) - 1
    _title, sha256, *_ = imported_files(engine, app.tenant)[os.fsencode(changed)]
    assert sha256 == digest(b"# B, changed\n")


def test_import_command_through_the_application_role(
    engine: Engine, app: AsApplication, tmp_path: Path
) -> None:
    url = app.engine.url.render_as_string(hide_password=False)
    own = ["--tenant", app.tenant, "--user", str(app.admin), "--blobs", str(tmp_path / "blobs")]

    status = main(["--database-url", url, "import", str(app.tree), *own])

    assert status == 0
    _check_imported(engine, app)
