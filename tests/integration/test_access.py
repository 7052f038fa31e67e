"""Access control through the application's role: row-level security hides, triggers refuse.

The suite's own engine is a superuser, which row-level security never applies to; these tests
act through ``app_engine``, whose connections take the role of an ordinary application
(:func:`dms.testing.roles.application_engine`: no superuser, no BYPASSRLS), as a deployment
must (docs/access.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import citus, tenancy
from dms.domain import DocumentQuery
from dms.domain.access import ALL_RIGHTS, Rights, check_rights
from dms.errors import NotFound, PermissionDenied, ValidationError
from dms.schema import tenant as t
from dms.services import add_revision
from dms.testing.roles import application_engine
from dms.uow import UnitOfWork
from tests.conftest import new_user


@pytest.fixture
def app_engine(engine: Engine, tenant: str) -> Iterator[Engine]:
    """An engine whose sessions act as the application role, granted the tenant's tables."""
    application = application_engine(engine, [tenant])
    yield application
    application.dispose()


@dataclass(frozen=True)
class World:
    """Folders ``shared`` (with ``shared/inner``) and ``private``, a document in each."""

    admin: uuid.UUID
    alice: uuid.UUID
    bob: uuid.UUID
    shared: uuid.UUID
    inner: uuid.UUID
    private: uuid.UUID
    shared_doc: uuid.UUID
    inner_doc: uuid.UUID
    private_doc: uuid.UUID


@pytest.fixture
def world(engine: Engine, app_engine: Engine, tenant: str) -> World:
    """The folders and documents, made by ``admin``; everyone's root entry removed."""
    admin, alice, bob = (new_user(engine, name) for name in ("admin", "alice", "bob"))
    with UnitOfWork(app_engine, tenant=tenant, user_id=admin) as uow:
        shared = uow.folders.add(name="shared")
        inner = uow.folders.add(name="inner", parent_id=shared.id)
        private = uow.folders.add(name="private")
        docs = [
            uow.documents.add(title=title, folder_id=folder.id)
            for title, folder in (("s", shared), ("i", inner), ("p", private))
        ]
        uow.access.grant(ALL_RIGHTS, user_id=admin)
        assert uow.access.revoke()  # everyone's entry at the root
        uow.commit()
    return World(admin, alice, bob, shared.id, inner.id, private.id, *(d.id for d in docs))


def _visible(app_engine: Engine, tenant: str, user: uuid.UUID) -> set[uuid.UUID]:
    with UnitOfWork(app_engine, tenant=tenant, user_id=user) as uow:
        page = uow.documents.search(DocumentQuery(), limit=100)
        return {document.id for document in page.items}


def test_a_tenant_behaves_as_before_until_its_entries_change(
    engine: Engine, app_engine: Engine, tenant: str
) -> None:
    alice, bob = new_user(engine, "alice"), new_user(engine, "bob")
    with UnitOfWork(app_engine, tenant=tenant, user_id=alice) as uow:
        folder = uow.folders.add(name="f")
        document = uow.documents.add(title="d", folder_id=folder.id)
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=bob) as uow:
        assert uow.documents.get(document.id).title == "d"
        uow.documents.rename(document.id, title="renamed", version=1)
        assert uow.access.rights(document_id=document.id) == ALL_RIGHTS
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant) as uow:  # nobody named: everyone's rights
        assert uow.documents.get(document.id).title == "renamed"


def test_a_user_sees_only_what_is_granted_to_them(
    app_engine: Engine, tenant: str, world: World
) -> None:
    assert _visible(app_engine, tenant, world.alice) == set()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.alice)
        uow.commit()

    # The folder's entry holds below it too.
    assert _visible(app_engine, tenant, world.alice) == {world.shared_doc, world.inner_doc}
    assert _visible(app_engine, tenant, world.bob) == set()
    assert _visible(app_engine, tenant, world.admin) == {
        world.shared_doc,
        world.inner_doc,
        world.private_doc,
    }
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.alice) as uow:
        with pytest.raises(NotFound):
            uow.documents.get(world.private_doc)
        with pytest.raises(NotFound):
            uow.folders.get(world.private)
        assert [f.id for f in uow.folders.children(None)] == [world.shared]


def test_the_current_revision_of_a_document_one_may_not_view_is_not_found(
    app_engine: Engine, tenant: str, world: World
) -> None:
    """As every read of what a user may not view: NotFound, as for a document not there."""
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uploaded = add_revision(
            uow,
            world.private_doc,
            storage_key=f"blobs/{uuid.uuid4()}",
            sha256="a" * 64,
            size_bytes=1,
            mime_type="text/plain",
        )
        uow.commit()

    with UnitOfWork(app_engine, tenant=tenant, user_id=world.alice) as uow:
        with pytest.raises(NotFound, match=f"^document {world.private_doc} does not exist"):
            uow.revisions.current(world.private_doc)
        nowhere = uuid.uuid4()
        with pytest.raises(NotFound, match=f"^document {nowhere} does not exist"):
            uow.revisions.current(nowhere)
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        assert uow.revisions.current(world.private_doc) == uploaded
        assert uow.revisions.current(world.shared_doc) is None  # no upload yet


def test_a_content_search_follows_each_document_wherever_its_access_goes(
    app_engine: Engine, tenant: str, world: World
) -> None:
    # Revision 0021: a search passes over the matches whose search rows say that the user may
    # not view them; the rows must follow every change of their document's scope and owner.
    def found(user: uuid.UUID) -> set[uuid.UUID]:
        with UnitOfWork(app_engine, tenant=tenant, user_id=user) as uow:
            page = uow.documents.search(DocumentQuery(text="quarterly"), limit=10)
            return {document.id for document in page.items}

    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        moved, shared, owned = (
            uow.documents.add(title=f"quarterly {n}", folder_id=world.private) for n in range(3)
        )
        uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.alice)
        uow.commit()
    assert found(world.alice) == set()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.documents.move(moved.id, folder_id=world.shared, version=moved.version)
        uow.access.grant(Rights.VIEW, document_id=shared.id, user_id=world.alice)
        uow.access.set_owner(world.alice, document_id=owned.id)
        uow.commit()
    assert found(world.alice) == {moved.id, shared.id, owned.id}
    # The first entry on a folder points the documents below it to its scope.
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, folder_id=world.private, user_id=world.bob)
        uow.commit()
    assert found(world.bob) == {shared.id, owned.id}


def test_a_change_needs_its_right(app_engine: Engine, tenant: str, world: World) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.alice)
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.alice) as uow:
        with pytest.raises(PermissionDenied, match="edit"):
            uow.documents.rename(world.shared_doc, title="mine now", version=1)
        with pytest.raises(PermissionDenied):
            uow.documents.add(title="new", folder_id=world.shared)
        with pytest.raises(PermissionDenied, match="manage"):
            uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.bob)
        with pytest.raises(NotFound):  # may not see it: not told that it exists
            uow.access.grant(Rights.VIEW, folder_id=world.private, user_id=world.alice)
        assert uow.access.rights(folder_id=world.shared) == Rights.VIEW

    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(["edit"], folder_id=world.shared, user_id=world.alice)
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.alice) as uow:
        renamed = uow.documents.rename(world.shared_doc, title="mine now", version=1)
        with pytest.raises(PermissionDenied, match="delete"):
            uow.documents.soft_delete(world.shared_doc, version=renamed.version)
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        assert uow.documents.get(world.shared_doc).title == "mine now"


def test_moving_needs_edit_on_both_folders_and_carries_the_access_of_the_destination(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(["edit"], folder_id=world.shared, user_id=world.alice)
        uow.access.grant(Rights.VIEW, folder_id=world.private, user_id=world.bob)
        uow.commit()
    alices = UnitOfWork(app_engine, tenant=tenant, user_id=world.alice)
    with alices as uow, pytest.raises(NotFound):  # a destination she may not see
        uow.folders.move(world.inner, parent_id=world.private)
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, folder_id=world.private, user_id=world.alice)
        uow.commit()
    alices = UnitOfWork(app_engine, tenant=tenant, user_id=world.alice)
    with alices as uow, pytest.raises(PermissionDenied, match="edit"):  # one she may only view
        uow.folders.move(world.inner, parent_id=world.private)
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.revoke(folder_id=world.private, user_id=world.alice)
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.folders.move(world.inner, parent_id=world.private)
        uow.commit()

    assert _visible(app_engine, tenant, world.alice) == {world.shared_doc}
    assert _visible(app_engine, tenant, world.bob) == {world.private_doc, world.inner_doc}


def test_a_folder_that_stops_inheriting_keeps_only_its_own_entries(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.alice)
        uow.access.set_inherits(world.inner, False)
        uow.commit()
    assert _visible(app_engine, tenant, world.alice) == {world.shared_doc}
    # The root's entries do not reach it either; its owner still sees what they own.
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        assert uow.access.rights(folder_id=world.inner) == ALL_RIGHTS  # owner
        # Giving it away would take it out of the admin's own sight: refused.
        with pytest.raises(PermissionDenied, match="row-level security"):
            uow.access.set_owner(None, document_id=world.inner_doc)
    with UnitOfWork(app_engine, tenant=tenant, system="operator") as uow:
        uow.access.set_owner(None, document_id=world.inner_doc)
        uow.commit()
    assert _visible(app_engine, tenant, world.admin) == {world.shared_doc, world.private_doc}

    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, folder_id=world.inner, user_id=world.bob)
        uow.access.set_inherits(world.inner, True)
        uow.commit()
    assert _visible(app_engine, tenant, world.alice) == {world.shared_doc, world.inner_doc}
    assert _visible(app_engine, tenant, world.bob) == {world.inner_doc}


def test_groups_grant_their_members_and_a_revocation_reaches_an_open_unit_of_work(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        readers = uow.access.add_group("readers")
        uow.access.grant(Rights.VIEW, folder_id=world.private, group_id=readers.id)
        uow.access.add_member(readers.id, world.bob)
        uow.commit()

    with UnitOfWork(app_engine, tenant=tenant, user_id=world.bob) as bobs:
        assert bobs.documents.get(world.private_doc).title == "p"
        with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
            assert uow.access.members(readers.id) == [world.bob]
            assert uow.access.remove_member(readers.id, world.bob)
            uow.commit()
        # Read committed: the next statement of the open unit of work sees the revocation.
        with pytest.raises(NotFound):
            bobs.documents.get(world.private_doc)


def test_folders_and_documents_say_who_owns_them(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        assert uow.folders.get(world.inner).owner_id == world.admin  # its creator
        assert uow.documents.get(world.inner_doc).owner_id == world.admin
        uow.access.set_owner(world.bob, document_id=world.inner_doc)
        uow.access.set_owner(None, folder_id=world.inner)
        assert uow.documents.get(world.inner_doc).owner_id == world.bob
        assert uow.folders.get(world.inner).owner_id is None


def test_a_document_entry_and_ownership_reach_one_document(
    engine: Engine, app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, document_id=world.private_doc, user_id=world.alice)
        uow.access.set_owner(world.bob, document_id=world.inner_doc)
        assert uow.access.owner(document_id=world.inner_doc) == world.bob
        uow.commit()

    assert _visible(app_engine, tenant, world.alice) == {world.private_doc}
    assert _visible(app_engine, tenant, world.bob) == {world.inner_doc}
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.bob) as uow:
        assert uow.access.rights(document_id=world.inner_doc) == ALL_RIGHTS
        uow.documents.rename(world.inner_doc, title="bob's", version=1)
        uow.commit()


def test_deleting_a_tag_used_where_one_cannot_see_needs_manage_at_the_root(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        tag = uow.tags.add(name="secret")
        uow.tags.link([world.private_doc], [tag.id])
        uow.access.grant(["edit"], folder_id=world.shared, user_id=world.alice)
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.alice) as uow:
        assert uow.tags.get(tag.id).name == "secret"  # the vocabulary is everyone's to see
        uow.tags.rename(tag.id, name="renamed")
        with pytest.raises(PermissionDenied, match="manage on the root"):
            uow.tags.delete(tag.id)
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        assert [t.name for t in uow.tags.tags_of(world.private_doc)] == ["renamed"]


def test_the_audit_trail_records_who_granted_revoked_and_joined(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        readers = uow.access.add_group("readers")
        uow.access.grant(Rights.VIEW, folder_id=world.shared, group_id=readers.id)
        uow.access.add_member(readers.id, world.bob)
        uow.access.grant(["edit"], folder_id=world.shared, group_id=readers.id)
        assert uow.access.revoke(folder_id=world.shared, group_id=readers.id)
        uow.commit()

    with UnitOfWork(app_engine, tenant=tenant, system="auditor") as uow:
        entries = uow.audit.events(object_type="access_entry", actor_id=world.admin).items
        groups = uow.audit.events(object_type="group").items
        members = uow.audit.events(object_type="group_member").items
    revoked, raised, granted = entries[:3]  # newest first
    assert [e.action for e in (revoked, raised, granted)] == ["delete", "update", "create"]
    assert granted.after is not None
    assert granted.after["group_id"] == str(readers.id)
    assert granted.after["rights"] == Rights.VIEW
    assert (raised.before, raised.after) == ({"rights": 1}, {"rights": 3})  # what changed
    assert revoked.before is not None
    assert revoked.before["group_id"] == str(readers.id)
    assert [(e.action, (e.after or {}).get("name")) for e in groups] == [("create", "readers")]
    assert [(e.action, e.object_id, e.actor_id) for e in members] == [
        ("create", readers.id, world.admin)
    ]


def test_a_system_principal_acts_on_everything_by_name(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, system="nightly") as uow:
        assert uow.documents.get(world.private_doc).title == "p"
        assert uow.access.rights(folder_id=world.private) == ALL_RIGHTS


def test_raw_sql_through_the_application_role_is_held_to_the_same_rules(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.alice)
        uow.commit()
    documents, grants = t.documents, t.access_grants
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.alice) as uow:
        conn = uow.connection
        seen = set(conn.execute(sa.select(documents.c.id)).scalars())
        assert seen == {world.shared_doc, world.inner_doc}
        revisions = conn.execute(sa.select(sa.func.count()).select_from(t.file_revisions))
        assert revisions.scalar() == 0
        hidden = sa.update(documents).where(documents.c.id == world.private_doc)
        assert conn.execute(hidden.values(title="x")).rowcount == 0
        # The derived tables are the triggers' alone.
        with pytest.raises(sa.exc.ProgrammingError) as refused, conn.begin_nested():
            conn.execute(
                sa.insert(grants).values(
                    scope_id=uuid.UUID(t.NIL_ID), principal_id=world.alice, rights=15
                )
            )
        assert getattr(refused.value.orig, "sqlstate", None) == "42501"
        # A forged scope is put back by the database.
        visible = sa.update(documents).where(documents.c.id == world.shared_doc)
        with pytest.raises(sa.exc.ProgrammingError), conn.begin_nested():
            conn.execute(visible.values(access_scope=uuid.UUID(t.NIL_ID)))


def test_the_policies_are_forced_on_the_tables_owner_too(engine: Engine, tenant: str) -> None:
    schema = tenancy.schema_name(tenant)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = :schema AND c.relname = ANY(:tables)"
            ),
            {"schema": schema, "tables": ["documents", "folders", "file_revisions"]},
        ).all()
    assert sorted(rows) == [
        ("documents", True, True),
        ("file_revisions", True, True),
        ("folders", True, True),
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["view"], Rights.VIEW),
        (["edit"], Rights.VIEW | Rights.EDIT),
        (["DELETE"], Rights.VIEW | Rights.DELETE),
        (["manage"], ALL_RIGHTS),
        (Rights.EDIT, Rights.VIEW | Rights.EDIT),
    ],
)
def test_rights_are_completed(value: object, expected: Rights) -> None:
    assert check_rights(value) == expected


@pytest.mark.parametrize("value", [[], ["own"], "view", 0, 16, True, None, [1]])
def test_bad_rights_are_refused(value: object) -> None:
    with pytest.raises(ValidationError):
        check_rights(value)


def test_bad_arguments_are_refused_before_any_sql(
    app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        with pytest.raises(ValidationError):
            uow.access.grant(Rights.VIEW, folder_id=world.shared, document_id=world.shared_doc)
        with pytest.raises(ValidationError):
            uow.access.grant(Rights.VIEW, user_id=world.alice, group_id=world.alice)
        with pytest.raises(ValidationError):
            uow.access.add_group(" ")
        with pytest.raises(ValidationError):
            uow.access.set_owner(world.alice)
        with pytest.raises(ValidationError):
            uow.access.set_inherits(world.shared, "no")  # type: ignore[arg-type]
        with pytest.raises(NotFound):
            uow.access.remove_group(uuid.uuid4())
        assert uow.access.entries() == [
            entry for entry in uow.access.entries() if entry.user_id == world.admin
        ]


def test_every_read_path_leaves_out_what_the_actor_may_not_view(
    app_engine: Engine, tenant: str, world: World
) -> None:
    sha = "ab" * 32
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        tag = uow.tags.add(name="invoices")
        for document in (world.shared_doc, world.private_doc):
            uow.revisions.add(
                document, storage_key=f"k/{sha}", sha256=sha, size_bytes=1, mime_type="text/plain"
            )
            uow.tags.link([document], [tag.id])
        uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.alice)
        uow.commit()

    with UnitOfWork(app_engine, tenant=tenant, user_id=world.alice) as uow:
        assert len(uow.revisions.history(world.shared_doc)) == 1
        assert uow.revisions.history(world.private_doc) == []
        assert [d.id for d in uow.documents.with_any_tag([tag.id])] == [world.shared_doc]
        assert uow.tags.tags_of(world.private_doc) == []
        found = uow.documents.search(DocumentQuery(tags_any=frozenset({tag.id})))
        assert [d.id for d in found.items] == [world.shared_doc]
        titled = uow.documents.search(DocumentQuery(title_contains="p"))
        assert titled.items == []
        assert [f.id for f in uow.folders.path(world.inner)] == [world.shared, world.inner]
        assert uow.access.entries(folder_id=world.shared)[0].user_id == world.alice
        # The audit trail tells only of what she may see.
        assert uow.audit.history(world.private_doc).items == []
        assert {e.action for e in uow.audit.history(world.shared_doc).items} >= {"create"}
        told = {e.document_id for e in uow.audit.events(object_type="document").items}
        assert told == {world.shared_doc, world.inner_doc}
        with pytest.raises(NotFound):
            uow.access.entries(folder_id=world.private)


@pytest.mark.citus_only
def test_the_policies_hold_on_the_node_that_holds_the_tenant(
    engine: Engine, app_engine: Engine, tenant: str, world: World
) -> None:
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.alice)
        uow.commit()
    schema = tenancy.schema_name(tenant)
    with engine.connect() as conn:
        node = citus.schema_nodes(conn)[schema]
        shard = conn.execute(
            sa.text("SELECT shard_name FROM citus_shards WHERE table_name = CAST(:t AS regclass)"),
            {"t": f"{schema}.documents"},
        ).scalar_one()
    assert not node.is_coordinator
    # Straight to the worker, as the application role: its table of the tenant, and the shard
    # itself, under the same policies.
    worker = sa.create_engine(
        app_engine.url.set(host=node.host, port=node.port), poolclass=sa.NullPool
    )
    try:
        with worker.begin() as conn:
            for setting, value in (
                ("dms.actor", str(world.alice)),
                ("citus.allow_nested_distributed_execution", "on"),
            ):
                conn.execute(sa.select(sa.func.set_config(setting, value, True)))
            shell = sa.table("documents", sa.column("id"), schema=schema)
            on_shard = sa.table(shard.split(".")[-1], sa.column("id"), schema=schema)
            for table in (shell, on_shard):
                seen = set(conn.execute(sa.select(table.c.id)).scalars())
                assert seen == {world.shared_doc, world.inner_doc}, table
    finally:
        worker.dispose()


def test_a_subtree_is_the_tree_the_user_sees(app_engine: Engine, tenant: str, world: World) -> None:
    """docs/access.md: a folder the user may not view cuts the tree for them. A folder below it
    that they may view (its own entry) is a top of their tree: its path starts at it, and a
    search of the subtree above the hidden folder leaves its documents out, as it leaves out
    the hidden folder's own (what would otherwise tell them where the folder sits)."""
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        below = uow.folders.add(name="below", parent_id=world.inner)
        deep = uow.documents.add(title="deep", folder_id=below.id)
        uow.access.grant(Rights.VIEW, folder_id=world.shared, user_id=world.alice)
        uow.access.set_inherits(world.inner, False)  # shared's entries stop at inner
        uow.access.grant(Rights.VIEW, folder_id=below.id, user_id=world.alice)
        uow.commit()
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.alice) as uow:
        under_shared = uow.documents.search(DocumentQuery(folder_id=world.shared), limit=10)
        under_below = uow.documents.search(DocumentQuery(folder_id=below.id), limit=10)
        assert [d.id for d in under_shared.items] == [world.shared_doc]
        assert [d.id for d in under_below.items] == [deep.id]
        assert [f.id for f in uow.folders.path(below.id)] == [below.id]
        with pytest.raises(NotFound):
            uow.folders.get(world.inner)
    with UnitOfWork(app_engine, tenant=tenant, user_id=world.admin) as uow:
        under_shared = uow.documents.search(DocumentQuery(folder_id=world.shared), limit=10)
        assert {d.id for d in under_shared.items} == {world.shared_doc, world.inner_doc, deep.id}
