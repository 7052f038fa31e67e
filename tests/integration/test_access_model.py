"""Effective access, kept incrementally by the database, against a reference model in Python.

Hypothesis drives a state machine over one small world per run. A run starts from a random
world (:class:`Seed`): a folder tree (some folders not inheriting), documents in folders or at
the top level (some with revisions), access entries for users, groups and everyone on folders,
documents and the root, owners (or none), members of :data:`GROUPS` groups among :data:`USERS`
users. Its rules then change it as a system principal through the unit of work: add folders (up
to :data:`MAX_FOLDERS`) and documents (up to :data:`MAX_DOCUMENTS`), move them, switch
inheritance, grant and revoke, add and remove members, replace a group (its entries go with
it), give objects away, purge documents. The triggers of migration 0016 keep effective access
incrementally (scopes, grants, rows repointed on moves); the :class:`Model` recomputes it from
scratch by the rules of docs/access.md.

After every step, what every user sees must agree with the model: a search of every document,
the children of every folder that has some and of the top level, and ``access.rights`` at the
root; and for one user in turn, every read path object by object: the search page by page
(keyset), ``documents.get`` and ``folders.get`` (:class:`~dms.errors.NotFound` for what the user
may not view), revision histories, and ``access.rights`` on every folder and document. A rule
tries a rename as one user (never committed): it must succeed with ``EDIT``, be refused with
:class:`~dms.errors.PermissionDenied` if the user may only view, and be
:class:`~dms.errors.NotFound` if the user may not view. Another sends raw SQL as one user
(:data:`RAW_WRITES`: a rename, a delete, an entry granting herself every right, a forged grant,
an erased audit event), as an application may on a user's behalf: each must change one row
with the right it needs, be refused (SQLSTATE 42501) with less, and change nothing on what the
user may not view; an accepted rename is committed, the model follows, and the audit trail
must verify and name the user as its actor (docs/security.md).

Everything acts through the application's ordinary role
(:func:`dms.testing.roles.application_engine`): a superuser passes row-level security. The
module's one tenant is emptied at the start of each run (creating a tenant costs seconds).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError

from dms import provisioning, tenancy
from dms.audit import verify_audit_trail
from dms.domain import DocumentQuery
from dms.domain.access import ALL_RIGHTS, Rights, check_rights
from dms.domain.text_query import parse_text_query
from dms.driver_errors import sqlstate_of
from dms.errors import InvariantViolation, NotFound, PermissionDenied
from dms.repositories.search import matching_parts
from dms.schema import tenant as t
from dms.testing.factories import DocumentFactory, FolderFactory, RevisionFactory
from dms.testing.roles import application_engine
from dms.uow import UnitOfWork
from dms.users import create_user
from tests.conftest import new_slug

#: Runs of the state machine, and steps per run: 20 s to a minute on two busy shared cores.
EXAMPLES = 25
STEPS = 10
#: The size of a world.
MAX_FOLDERS = 8
MAX_DOCUMENTS = 6
USERS = 4
GROUPS = 2
#: Documents per page when the search is read page by page (keyset pages).
PAGE_SIZE = 2
#: The system principal that builds the world.
SYSTEM = "model"


# --- the reference model -------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Ref:
    """A folder, a document or the root, by its name in the model (``f0``, ``d3``, ``root``)."""

    kind: Literal["folder", "document", "root"]
    name: str

    def __repr__(self) -> str:
        return self.name


ROOT = Ref("root", "root")


@dataclass(frozen=True, order=True)
class Principal:
    """A user or a group by its slot (``user 2``, ``group 0``), or everyone."""

    kind: Literal["user", "group", "everyone"]
    slot: int = 0

    def __repr__(self) -> str:
        return "everyone" if self.kind == "everyone" else f"{self.kind} {self.slot}"


EVERYONE = Principal("everyone")


@dataclass
class ModelFolder:
    """A folder as the model sees it."""

    id: uuid.UUID
    name: str
    parent: str | None
    inherits: bool
    owner: int | None


@dataclass
class ModelDocument:
    """A document as the model sees it."""

    id: uuid.UUID
    title: str
    folder: str | None
    owner: int | None
    revisions: int


@dataclass
class Model:
    """The world, and who may do what in it, recomputed from scratch by the rules of
    docs/access.md."""

    folders: dict[str, ModelFolder] = field(default_factory=dict)
    documents: dict[str, ModelDocument] = field(default_factory=dict)
    entries: dict[tuple[Ref, Principal], Rights] = field(default_factory=dict)
    members: dict[int, set[int]] = field(default_factory=dict)

    def principals(self, user: int) -> set[Principal]:
        """Everyone, the user, and the groups the user is a member of."""
        groups = {Principal("group", g) for g, users in self.members.items() if user in users}
        return {EVERYONE, Principal("user", user), *groups}

    def reaching(self, ref: Ref) -> list[tuple[Principal, Rights]]:
        """The entries that hold on ``ref``: its own, and those it inherits."""
        own = [(who, rights) for (on, who), rights in self.entries.items() if on == ref]
        if ref.kind == "root":
            return own
        if ref.kind == "document":  # a document always inherits from its folder
            return own + self.reaching(self._folder_ref(self.documents[ref.name].folder))
        folder = self.folders[ref.name]
        return own + (self.reaching(self._folder_ref(folder.parent)) if folder.inherits else [])

    def rights(self, user: int, ref: Ref) -> Rights:
        """What ``user`` holds on ``ref``: what reaches it for their principals, or all as owner."""
        if ref.kind != "root" and self.owner(ref) == user:
            return ALL_RIGHTS
        principals = self.principals(user)
        held = Rights(0)
        for who, rights in self.reaching(ref):
            if who in principals:
                held |= rights
        return held

    def may_view(self, user: int, ref: Ref) -> bool:
        """Whether ``user`` may view ``ref``."""
        return Rights.VIEW in self.rights(user, ref)

    def owner(self, ref: Ref) -> int | None:
        """The owner of a folder or a document."""
        objects = self.folders if ref.kind == "folder" else self.documents
        return objects[ref.name].owner

    def below(self, name: str) -> set[str]:
        """The folder ``name`` and every folder under it."""
        return {name} | {other for other in self.folders if self._under(other, name)}

    def visible_documents(self, user: int) -> list[uuid.UUID]:
        """The ids of the documents ``user`` may view, in the order of a search (by title)."""
        visible = [d for n, d in self.documents.items() if self.may_view(user, document(n))]
        return [d.id for d in sorted(visible, key=lambda d: (d.title.lower(), d.id))]

    def visible_children(self, user: int, parent: str | None) -> list[uuid.UUID]:
        """The ids of the folders directly under ``parent`` that ``user`` may view, by name."""
        children = [
            f
            for n, f in self.folders.items()
            if f.parent == parent and self.may_view(user, folder(n))
        ]
        return [f.id for f in sorted(children, key=lambda f: (f.name.lower(), f.id))]

    def forget(self, ref: Ref) -> None:
        """Drop the entries on ``ref`` (its object is gone)."""
        for key in [key for key in self.entries if key[0] == ref]:
            del self.entries[key]

    def _under(self, name: str, ancestor: str) -> bool:
        parent = self.folders[name].parent
        while parent is not None:
            if parent == ancestor:
                return True
            parent = self.folders[parent].parent
        return False

    @staticmethod
    def _folder_ref(name: str | None) -> Ref:
        return ROOT if name is None else folder(name)


def folder(name: str) -> Ref:
    """The reference to folder ``name``."""
    return Ref("folder", name)


def document(name: str) -> Ref:
    """The reference to document ``name``."""
    return Ref("document", name)


# --- the module's tenant -------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """The module's tenant, the application's engine on it, and its users."""

    tenant: str
    app: Engine
    users: tuple[uuid.UUID, ...]
    #: The suite's superuser engine, for what the application's role may not do (ANALYZE).
    admin: Engine


@pytest.fixture(scope="module")
def stage(engine: Engine) -> Iterator[Stage]:
    """One tenant for every run of the module (emptied at the start of each run)."""
    slug = new_slug()
    provisioning.create_tenant(engine, slug)
    with engine.begin() as conn:
        users = tuple(
            create_user(conn, email=f"user{i}-{uuid.uuid4().hex}@example.org", display_name=f"u{i}")
            for i in range(USERS)
        )
    app = application_engine(engine, [slug], poolclass=sa.pool.QueuePool)
    yield Stage(slug, app, users, engine)
    app.dispose()
    provisioning.drop_tenant(engine, slug)


def empty(conn: Connection) -> None:
    """Delete the world (documents, then folders leaves first, entries, groups) as a system
    principal; the database drops the scopes of the objects with them."""
    conn.execute(sa.delete(t.documents))
    parents = sa.select(t.folders.c.parent_id).where(t.folders.c.parent_id.is_not(None))
    while conn.execute(sa.delete(t.folders).where(t.folders.c.id.not_in(parents))).rowcount:
        pass
    conn.execute(sa.delete(t.access_entries))
    conn.execute(sa.delete(t.access_groups))
    left = set(conn.execute(sa.select(t.access_scopes.c.id)).scalars())
    assert left == {uuid.UUID(t.NIL_ID)}, "the scopes of deleted objects were left behind"


# --- the state machine ---------------------------------------------------------------------

users = st.integers(0, USERS - 1)
groups = st.integers(0, GROUPS - 1)
owners = st.none() | users
principals = st.one_of(
    st.just(EVERYONE),
    users.map(lambda slot: Principal("user", slot)),
    groups.map(lambda slot: Principal("group", slot)),
)
#: Every set of rights an entry can hold, completed (view with each right, all with manage).
rights = st.sampled_from(sorted({check_rights(mask) for mask in range(1, int(ALL_RIGHTS) + 1)}))
#: Most folders inherit, so that entries reach down a few levels.
inheriting = st.sampled_from([True, True, False])

#: Raw statements a user sends (:meth:`AccessMachine.raw_write`), by kind: ``{s}`` the
#: tenant's schema, ``{table}``/``{name}``/``{column}`` the target's table, its name column and
#: the column an entry names it by, ``{id}`` its id, ``{me}`` the acting user.
RAW_WRITES = {
    "rename": "UPDATE {s}.{table} SET {name} = {name} || '~' WHERE id = '{id}'",
    "delete": "DELETE FROM {s}.{table} WHERE id = '{id}'",
    "grant_self": (
        "INSERT INTO {s}.access_entries ({column}, user_id, rights) VALUES ('{id}', '{me}', 15)"
    ),
    "forge_grant": "UPDATE {s}.access_grants SET rights = 15 WHERE scope_id = '{id}'",
    "erase_trail": "DELETE FROM {s}.audit_events WHERE object_id = '{id}'",
}
#: The right each kind needs on its target (``None``: no user may, whatever they hold).
RAW_NEEDS: dict[str, Rights | None] = {
    "rename": Rights.EDIT,
    "delete": Rights.DELETE,
    "grant_self": Rights.MANAGE,
    "forge_grant": None,
    "erase_trail": None,
}

#: Every folder and document of a run; ``some_folder`` where a rule wants a folder.
objects = Bundle("objects")
some_folder = objects.filter(lambda ref: ref.kind == "folder")


@dataclass(frozen=True)
class Seed:
    """The world a run starts from, built in one unit of work.

    ``folders``: (index of the parent folder or None, inherits, owner) each, a parent before its
    children; ``documents``: (index of the folder or None, owner, revisions) each; ``entries``:
    (object, principal, rights) each; ``members``: (group, user) each.
    """

    folders: tuple[tuple[int | None, bool, int | None], ...]
    documents: tuple[tuple[int | None, int | None, int], ...]
    entries: tuple[tuple[Ref, Principal, Rights], ...]
    members: frozenset[tuple[int, int]]


@st.composite
def seeds(draw: st.DrawFn) -> Seed:
    """A world of up to six folders and five documents, with entries and members."""
    folder_count = draw(st.integers(0, 6))
    folders = tuple(
        (draw(st.none() | st.integers(0, i - 1)) if i else None, draw(inheriting), draw(owners))
        for i in range(folder_count)
    )
    places = (st.none() | st.integers(0, folder_count - 1)) if folder_count else st.none()
    documents = tuple(
        (draw(places), draw(owners), draw(st.integers(0, 2)))
        for _ in range(draw(st.integers(0, 5)))
    )
    on = st.sampled_from(
        [ROOT, *(folder(f"f{i}") for i in range(folder_count))]
        + [document(f"d{i}") for i in range(len(documents))]
    )
    entries = draw(
        st.lists(st.tuples(on, principals, rights), max_size=8, unique_by=lambda e: e[:2])
    )
    members = draw(st.frozensets(st.tuples(groups, users)))
    return Seed(folders, documents, tuple(entries), members)


class AccessMachine(RuleBasedStateMachine):
    """Changes a world through the unit of work; after each, compares every user's reads with
    the model."""

    def __init__(self, stage: Stage) -> None:
        super().__init__()
        self.stage = stage
        self.model = Model()
        self.group_ids: dict[int, uuid.UUID] = {}
        self.made = 0  # documents made in this run
        self.checks = 0  # steps checked in this run
        with self._system() as uow:
            empty(uow.connection)
            for slot in range(GROUPS):
                self.group_ids[slot] = uow.access.add_group(f"group {slot}").id
                self.model.members[slot] = set()
            uow.commit()

    # The world is built, and grows.

    @initialize(target=objects, seed=seeds())
    def build(self, seed: Seed) -> MultipleResults[Ref]:
        made: list[Ref] = []
        with self._system() as uow:
            for parent, inherits, owner in seed.folders:
                made.append(self._add_folder(uow, self._nth_folder(parent), inherits, owner))
            for place, owner, revisions in seed.documents:
                made.append(self._add_document(uow, self._nth_folder(place), owner, revisions))
            for on, who, granted in seed.entries:
                uow.access.grant(granted, **self._object(on), **self._principal(who))
                self.model.entries[on, who] = granted
            for group, user in seed.members:
                uow.access.add_member(self.group_ids[group], self.stage.users[user])
                self.model.members[group].add(user)
            uow.commit()
        return multiple(*made)

    @rule()
    def analyze(self) -> None:
        """Statistics as autovacuum would take them: a content search then chooses between
        checking every match and narrowing them by the user's folder scopes (revision 0020),
        from estimates that later steps make stale; what it finds must not depend on that."""
        schema = sql.Identifier(tenancy.schema_name(self.stage.tenant))
        with self.stage.admin.connect() as conn:
            driver = conn.connection.driver_connection
            assert isinstance(driver, psycopg.Connection)
            for table in ("documents", "document_search"):
                analyze = sql.SQL("ANALYZE {}.{}").format(schema, sql.Identifier(table))
                conn.exec_driver_sql(analyze.as_string(driver))
            conn.commit()

    @precondition(lambda self: len(self.model.folders) < MAX_FOLDERS)
    @rule(target=objects, parent=st.none() | some_folder, inherits=inheriting, owner=owners)
    def add_folder(self, parent: Ref | None, inherits: bool, owner: int | None) -> Ref:
        with self._system() as uow:
            made = self._add_folder(uow, parent, inherits, owner)
            uow.commit()
        return made

    @precondition(lambda self: len(self.model.documents) < MAX_DOCUMENTS)
    @rule(target=objects, into=st.none() | some_folder, owner=owners, revisions=st.integers(0, 2))
    def add_document(self, into: Ref | None, owner: int | None, revisions: int) -> Ref:
        with self._system() as uow:
            made = self._add_document(uow, into, owner, revisions)
            uow.commit()
        return made

    def _add_folder(
        self, uow: UnitOfWork, parent: Ref | None, inherits: bool, owner: int | None
    ) -> Ref:
        name = f"f{len(self.model.folders)}"  # folders are never deleted
        row = FolderFactory(
            conn=uow.connection,
            name=name,
            parent_id=self._place(parent),
            inherits=inherits,
            owner_id=self._user(owner),
            created_by=self.stage.users[0],
        )
        parent_name = None if parent is None else parent.name
        self.model.folders[name] = ModelFolder(row["id"], name, parent_name, inherits, owner)
        return folder(name)

    def _add_document(
        self, uow: UnitOfWork, into: Ref | None, owner: int | None, revisions: int
    ) -> Ref:
        name = f"d{self.made}"  # not len(documents): the name of a purged one is taken
        self.made += 1
        row = DocumentFactory(
            conn=uow.connection,
            title=f"document-{name}",
            folder_id=self._place(into),
            owner_id=self._user(owner),
            created_by=self.stage.users[0],
        )
        for _ in range(revisions):
            RevisionFactory(
                conn=uow.connection, document_id=row["id"], uploaded_by=self.stage.users[0]
            )
        into_name = None if into is None else into.name
        self.model.documents[name] = ModelDocument(
            row["id"], row["title"], into_name, owner, revisions
        )
        return document(name)

    def _nth_folder(self, index: int | None) -> Ref | None:
        return None if index is None else folder(f"f{index}")

    # The world changes.

    @rule(moved=objects, into=st.none() | some_folder)
    def move(self, moved: Ref, into: Ref | None) -> None:
        """Move a folder or a document (one rule: each is drawn as often as a change of access)."""
        if moved.kind == "folder":
            self._move_folder(moved, into)
        else:
            self._move_document(moved, into)

    def _move_folder(self, moved: Ref, parent: Ref | None) -> None:
        cycle = parent is not None and parent.name in self.model.below(moved.name)
        with self._system() as uow:
            if cycle:
                with pytest.raises(InvariantViolation):
                    uow.folders.move(self._id(moved), parent_id=self._place(parent))
                return
            uow.folders.move(self._id(moved), parent_id=self._place(parent))
            uow.commit()
        self.model.folders[moved.name].parent = None if parent is None else parent.name

    def _move_document(self, moved: Ref, into: Ref | None) -> None:
        with self._system() as uow:
            version = uow.documents.get(self._id(moved)).version
            uow.documents.move(self._id(moved), folder_id=self._place(into), version=version)
            uow.commit()
        self.model.documents[moved.name].folder = None if into is None else into.name

    @rule(switched=some_folder, inherits=st.booleans())
    def set_inherits(self, switched: Ref, inherits: bool) -> None:
        with self._system() as uow:
            uow.access.set_inherits(self._id(switched), inherits)
            uow.commit()
        self.model.folders[switched.name].inherits = inherits

    @rule(on=st.just(ROOT) | objects, who=principals, granted=rights)
    def grant(self, on: Ref, who: Principal, granted: Rights) -> None:
        with self._system() as uow:
            entry = uow.access.grant(granted, **self._object(on), **self._principal(who))
            uow.commit()
        assert entry.rights == granted
        self.model.entries[on, who] = granted

    @precondition(lambda self: self.model.entries)
    @rule(index=st.integers(0, 15))
    def revoke(self, index: int) -> None:
        """Revoke one of the entries (the ``index``-th, counting round)."""
        on, who = sorted(self.model.entries)[index % len(self.model.entries)]
        note(f"revoke: {who} on {on}")
        with self._system() as uow:
            assert uow.access.revoke(**self._object(on), **self._principal(who))
            assert not uow.access.revoke(**self._object(on), **self._principal(who))
            uow.commit()
        del self.model.entries[on, who]

    @rule(group=groups, user=users, change=st.sampled_from(["add", "remove", "replace"]))
    def change_group(self, group: int, user: int, change: str) -> None:
        """Add ``user`` to ``group``, remove them, or replace the group (entries, members and
        all) by a new one of the same name."""
        group_id, user_id, members = (
            self.group_ids[group],
            self.stage.users[user],
            self.model.members[group],
        )
        with self._system() as uow:
            if change == "add":
                uow.access.add_member(group_id, user_id)
                members.add(user)
            elif change == "remove":
                assert uow.access.remove_member(group_id, user_id) == (user in members)
                members.discard(user)
            else:
                uow.access.remove_group(group_id)
                self.group_ids[group] = uow.access.add_group(f"group {group}").id
                members.clear()
                self._forget_group(group)
            uow.commit()

    def _forget_group(self, group: int) -> None:
        for key in [key for key in self.model.entries if key[1] == Principal("group", group)]:
            del self.model.entries[key]

    @rule(given=objects, owner=owners)
    def set_owner(self, given: Ref, owner: int | None) -> None:
        with self._system() as uow:
            uow.access.set_owner(self._user(owner), **self._object(given))
            uow.commit()
        objects = self.model.folders if given.kind == "folder" else self.model.documents
        objects[given.name].owner = owner

    @precondition(lambda self: self.model.documents)  # else the filter draws folders only
    @rule(purged=consumes(objects).filter(lambda ref: ref.kind == "document"))
    def purge_document(self, purged: Ref) -> None:
        with self._system() as uow:
            uow.documents.purge(self._id(purged))
            uow.commit()
        del self.model.documents[purged.name]
        self.model.forget(purged)

    # One write, as one user: allowed with edit, refused if the user may only view, not found
    # if the user may not view. Never committed.

    @rule(renamed=objects, user=users)
    def try_rename(self, renamed: Ref, user: int) -> None:
        expected = self.model.rights(user, renamed)
        with self._system() as uow:
            version = (
                uow.documents.get(self._id(renamed)).version if renamed.kind == "document" else 0
            )
        with self._acting(user) as uow:
            rename = self._renaming(uow, renamed, version)
            if Rights.EDIT in expected:
                rename()
            elif Rights.VIEW in expected:
                with pytest.raises(PermissionDenied, match="edit"):
                    rename()
            else:
                with pytest.raises(NotFound):
                    rename()

    # Raw SQL as one user (docs/security.md): what an application may send on a user's behalf
    # is held to the same rules. An accepted rename is committed (the model follows) and must
    # be recorded by the audit trail, whose chain must verify after it.

    @rule(aimed=objects, user=users, kind=st.sampled_from(sorted(RAW_WRITES)))
    def raw_write(self, aimed: Ref, user: int, kind: str) -> None:
        if kind == "delete" and aimed.kind == "folder":
            return  # a folder's delete is refused by its contents' keys first: documents only
        held = self.model.rights(user, aimed)
        needed = RAW_NEEDS[kind]
        if kind == "grant_self" and (aimed, Principal("user", user)) in self.model.entries:
            needed = None  # her entry exists: a second one is refused by its key, or hidden
        with self._acting(user) as uow:
            driver = uow.connection.connection.driver_connection
            assert isinstance(driver, psycopg.Connection)
            statement = RAW_WRITES[kind].format(
                s=sql.Identifier(tenancy.schema_name(self.stage.tenant)).as_string(driver),
                table="folders" if aimed.kind == "folder" else "documents",
                name="name" if aimed.kind == "folder" else "title",
                column=f"{aimed.kind}_id",
                id=self._id(aimed),
                me=self.stage.users[user],
            )
            sqlstate: str | None = None
            try:
                changed = uow.connection.exec_driver_sql(statement).rowcount
            except DBAPIError as refused:
                changed, sqlstate = -1, sqlstate_of(refused)
            else:
                if kind == "rename" and changed == 1:
                    uow.commit()
        note(f"raw {kind} on {aimed} as user {user} holding {held!r}: {changed}, {sqlstate}")
        if needed is None:  # never allowed to anyone acting as a user
            assert changed <= 0, f"{kind} changed {changed} row(s)"
        elif needed in held:
            assert changed == 1, f"{kind} with {held!r}: {changed}, {sqlstate}"
        elif Rights.VIEW in held or kind == "grant_self":
            assert sqlstate == "42501", f"{kind} with {held!r}: {changed}, {sqlstate}"
        else:
            assert changed == 0, f"{kind} of a hidden object: {changed}, {sqlstate}"
        if kind == "rename" and changed == 1:
            self._renamed(aimed, user)

    def _renamed(self, aimed: Ref, user: int) -> None:
        if aimed.kind == "folder":
            self.model.folders[aimed.name].name += "~"
        else:
            self.model.documents[aimed.name].title += "~"
        verified = verify_audit_trail(self.stage.app, self.stage.tenant)
        with self._system() as uow:
            events = uow.audit.events(object_type=aimed.kind, action="update", limit=1).items
        assert verified.intact, verified
        assert [(e.object_id, e.actor_id) for e in events] == [
            (self._id(aimed), self.stage.users[user])
        ]

    def _renaming(self, uow: UnitOfWork, renamed: Ref, version: int) -> Callable[[], object]:
        object_id = self._id(renamed)
        if renamed.kind == "folder":
            return lambda: uow.folders.rename(object_id, name=f"{renamed.name} renamed")
        return lambda: uow.documents.rename(object_id, title="renamed", version=version)

    # What the users read. After every step, what every user sees (a search, the children of
    # every folder that has some, the rights at the root), and every read path of one user,
    # object by object, each user in turn (every user at every step takes minutes).

    @invariant()
    def search_rows_carry_their_documents_scope_and_owner(self) -> None:
        """Revision 0021's copies: a search skips the rows its actor may not view by them."""
        s, d = t.document_search, t.documents
        disagreeing = (
            sa.select(sa.func.count())
            .select_from(s.join(d, d.c.id == s.c.document_id))
            .where(
                sa.or_(
                    s.c.access_scope.is_distinct_from(d.c.access_scope),
                    s.c.owner_id.is_distinct_from(d.c.owner_id),
                )
            )
        )
        with self._system() as uow:
            assert uow.connection.scalar(disagreeing) == 0

    @invariant()
    def every_read_path_agrees_with_the_model(self) -> None:
        for user in range(USERS):
            with self._acting(user) as uow:
                self._check_search(uow, user)
                self._check_children(uow, user)
                assert uow.access.rights() == self.model.rights(user, ROOT), f"user {user}, root"
        user = self.checks % USERS
        self.checks += 1
        with self._acting(user) as uow:
            assert _paged(uow) == self.model.visible_documents(user), f"user {user}, pages"
            for name in self.model.documents:
                self._check_object(uow, user, document(name))
            for name in self.model.folders:
                self._check_object(uow, user, folder(name))

    def _check_search(self, uow: UnitOfWork, user: int) -> None:
        expected = self.model.visible_documents(user)
        found = uow.documents.search(DocumentQuery(), limit=MAX_DOCUMENTS + 1)
        assert [d.id for d in found.items] == expected, f"user {user}, search"
        # Every title holds the word: content search finds what the user may view (ranked).
        matched = uow.documents.search(DocumentQuery(text="document"), limit=MAX_DOCUMENTS + 1)
        assert sorted(d.id for d in matched.items) == sorted(expected), f"user {user}, words"
        # The search function alone (the repository reads its rows through the policies too):
        # every match, and one more than the user may view, which a word with more matches than
        # that may narrow by the user's folder scopes (revision 0020; after an analyze step).
        word, tenant = parse_text_query("document"), self.stage.tenant
        for most in (None, len(expected) + 1):
            parts = uow.connection.execute(matching_parts(tenant, word, max_rows=most)).all()
            # One part each (a title; no text extracted): each is found once.
            assert sorted(p.document_id for p in parts) == sorted(expected), (
                f"user {user}, parts, at most {most}"
            )

    def _check_children(self, uow: UnitOfWork, user: int) -> None:
        parents = {None} | {each.parent for each in self.model.folders.values()}
        for parent in parents:
            parent_id = None if parent is None else self.model.folders[parent].id
            children = [f.id for f in uow.folders.children(parent_id)]
            assert children == self.model.visible_children(user, parent), (
                f"user {user}, children of {parent or 'the top level'}"
            )

    def _check_object(self, uow: UnitOfWork, user: int, ref: Ref) -> None:
        """``get``, ``access.rights`` and (of a document) ``revisions.history`` of one object."""
        object_id, what = self._id(ref), f"user {user}, {ref}"
        read = uow.folders.get if ref.kind == "folder" else uow.documents.get
        history = uow.revisions.history if ref.kind == "document" else None
        if not self.model.may_view(user, ref):
            with pytest.raises(NotFound):
                read(object_id)
            with pytest.raises(NotFound):
                uow.access.rights(**self._object(ref))
            assert history is None or history(object_id) == [], what
            return
        assert read(object_id).id == object_id, what
        assert uow.access.rights(**self._object(ref)) == self.model.rights(user, ref), what
        if history is not None:
            revisions = self.model.documents[ref.name].revisions
            assert len(history(object_id)) == revisions, what

    def _acting(self, user: int) -> UnitOfWork:
        return UnitOfWork(self.stage.app, tenant=self.stage.tenant, user_id=self.stage.users[user])

    # Ids.

    def _system(self) -> UnitOfWork:
        return UnitOfWork(self.stage.app, tenant=self.stage.tenant, system=SYSTEM)

    def _id(self, ref: Ref) -> uuid.UUID:
        objects = self.model.folders if ref.kind == "folder" else self.model.documents
        return objects[ref.name].id

    def _place(self, ref: Ref | None) -> uuid.UUID | None:
        """The id of a folder to put something in, ``None`` for the top level."""
        return None if ref is None else self._id(ref)

    def _object(self, ref: Ref) -> dict[str, uuid.UUID]:
        return {} if ref.kind == "root" else {f"{ref.kind}_id": self._id(ref)}

    def _principal(self, who: Principal) -> dict[str, uuid.UUID]:
        if who.kind == "user":
            return {"user_id": self.stage.users[who.slot]}
        return {"group_id": self.group_ids[who.slot]} if who.kind == "group" else {}

    def _user(self, slot: int | None) -> uuid.UUID | None:
        return None if slot is None else self.stage.users[slot]


def _paged(uow: UnitOfWork) -> list[uuid.UUID]:
    """The ids of every document a search finds, read :data:`PAGE_SIZE` at a time."""
    found: list[uuid.UUID] = []
    page = uow.documents.search(DocumentQuery(), limit=PAGE_SIZE)
    found += [d.id for d in page.items]
    while page.next_cursor is not None:
        page = uow.documents.search(DocumentQuery(), limit=PAGE_SIZE, after=page.next_cursor)
        found += [d.id for d in page.items]
    return found


def test_every_read_path_agrees_with_a_model_of_the_access_rules(stage: Stage) -> None:
    run_state_machine_as_test(
        # A factory, as hypothesis documents, though its annotation asks for a class.
        lambda: AccessMachine(stage),  # type: ignore[arg-type]
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
