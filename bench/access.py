"""Access control at scale: reads and writes as users with entries against the same without it.

::

    python bench/access.py [--url URL] [--database dms_bench_access] [--rebuild] [--reps 11]
                           [--write]

One tenant (``big``) in a database of its own on ``--url``'s server, built once and kept
(``--rebuild`` builds it again): 1,000,000 documents in 10,000 folders (100 departments of 99
projects, ~101 documents each), 5,000 users, 200 groups, and access entries on 500 folders (5 %),
the root's entry for everyone revoked. Departments 0-89 are granted to their team (view, edit,
delete) and to their division (view, ten departments a division); in every department four
projects have entries of their own (a cross-team project group, a single user, a second project
group, and one that stops inheriting and is granted to the team only); departments 90-99 have
none of their own but a fifth project each, for a tenth division. A group of 4,999 users
("Staff") is named in 5,000 entries on single documents.

Folders, groups, members and entries are made through the unit of work (their triggers keep
scopes and grants); documents and their search rows are then bulk-inserted as superuser with
triggers off, with the scope the triggers would give them (their folder's), and checked against
an independent walk of the folder tree.

Read as an ordinary application role (:func:`dms.testing.roles.application_engine`): user
``half`` (five divisions: ~50 % of the documents) and user ``few`` (five teams: ~5 %), against a
system principal on the same role (the policies let it through after one check per statement)
and a superuser (row-level security does not apply). Each timed call is one public read,
``uow.documents.search(...)``, inside its own unit of work, principals taking turns; writes and
changes are timed inside a unit of work that is then rolled back, so the data set stays as built.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine, make_url

import dms
from bench.documents import Explain
from dms import DocumentQuery, UnitOfWork, tenancy
from dms.domain import Cursor, NewFolder, Page
from dms.domain.access import ALL_RIGHTS, Rights
from dms.domain.model import Document
from dms.schema import tenant as t
from dms.testing.roles import application_engine
from dms.users import create_users_stand_in, users_stand_in

TENANT = "big"
SCHEMA = tenancy.schema_name(TENANT)
RESULTS = Path(__file__).parent / "results" / "access.md"
DEPARTMENTS = 100
PROJECTS = 99
DOCUMENTS = 1_000_000
USERS = 5_000
#: Departments with entries of their own (the others fall under the root's scope).
GRANTED_DEPARTMENTS = 90
#: Groups: teams 0-99 (one per department), divisions 100-109, projects 110-197, Staff, admins.
TEAMS, DIVISIONS, PROJECT_GROUPS = 100, 10, 88
STAFF, ADMINS = "Staff", "Admins"
#: Documents shared with Staff one by one.
SHARED_DOCUMENTS = 5_000
PAGE = 50
#: Keyset pages after the first, per timed run.
LATER_PAGES = 2
#: Titles: a kind (1 in 40), a word (1 in 4,096) and a rarer word (1 in 65,536) of syllables.
KINDS = (
    "Invoice", "Contract", "Report", "Minutes", "Offer", "Order", "Receipt", "Statement",
    "Memo", "Letter", "Budget", "Plan", "Policy", "Manual", "Drawing", "Specification",
    "Protocol", "Certificate", "Application", "Agreement", "Proposal", "Review", "Audit",
    "Forecast", "Schedule", "Checklist", "Notice", "Claim", "Quote", "Summary", "Brief",
    "Study", "Survey", "Register", "Ledger", "Timesheet", "Roadmap", "Charter", "Licence",
    "Warranty",
)  # fmt: skip
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vi", "zo", "be", "da", "fe", "gu", "ho",
             "ji", "pa", "so")  # fmt: skip


@dataclass(frozen=True)
class World:
    """The ids the measurements need, read back by name from the built tenant."""

    admin: uuid.UUID
    half: uuid.UUID
    few: uuid.UUID
    newcomer: uuid.UUID
    departments: list[uuid.UUID]
    projects: list[list[uuid.UUID]]
    staff: uuid.UUID
    team: list[uuid.UUID]


@dataclass(frozen=True)
class Principal:
    """Who a timed read acts as: an engine and the unit of work's actor."""

    name: str
    engine: Engine
    user_id: uuid.UUID | None = None
    system: str | None = None

    def unit_of_work(self) -> UnitOfWork:
        return UnitOfWork(self.engine, tenant=TENANT, user_id=self.user_id, system=self.system)


@dataclass(frozen=True)
class ReadCase:
    """A class of reads: its query, and whether it follows keyset pages after the first."""

    name: str
    query: DocumentQuery
    later_pages: bool = False


@dataclass
class Timings:
    """Milliseconds per principal and class of reads."""

    ms: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def add(self, principal: str, case: str, value: float) -> None:
        self.ms.setdefault((principal, case), []).append(value)

    def p(self, principal: str, case: str, q: int) -> float:
        values = self.ms[(principal, case)]
        return statistics.median(values) if q == 50 else _p95(values)


def _p95(values: Sequence[float]) -> float:
    if len(values) < 2:
        return max(values)
    return statistics.quantiles(values, n=20, method="inclusive")[18]


# --- the data set ---------------------------------------------------------------------------


def database_engine(server: URL, name: str) -> Engine:
    """An engine on database ``name`` of ``server``, created if it does not exist."""
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.scalar(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
        if not exists:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    admin.dispose()
    return sa.create_engine(server.set(database=name), pool_size=4)


def built(engine: Engine) -> bool:
    with engine.connect() as conn:
        if conn.scalar(sa.text("SELECT to_regclass(:t)"), {"t": f"{SCHEMA}.documents"}) is None:
            return False
        count = conn.scalar(sa.text(f'SELECT count(*) FROM "{SCHEMA}".documents'))
    return bool(count == DOCUMENTS)


def build(engine: Engine, log: Callable[[str], None]) -> None:
    """The tenant from scratch: users, folders, groups, entries, then the documents."""
    started = time.perf_counter()
    create_users_stand_in(engine)
    dms.upgrade(engine)
    with engine.begin() as conn:
        conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE')
        conn.execute(sa.text("DELETE FROM dms.tenants WHERE slug = :s"), {"s": TENANT})
    dms.create_tenant(engine, TENANT)
    users = _users(engine)
    _tree_and_groups(engine, users)
    log(f"build: users, folders, groups and entries in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    _documents(engine, users)
    log(f"build: {DOCUMENTS:,} documents and search rows in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    _share_documents(engine)
    log(f"build: {SHARED_DOCUMENTS:,} document entries in {time.perf_counter() - started:.0f} s")
    vacuum(engine)


def upgrade(engine: Engine, log: Callable[[str], None]) -> None:
    """A kept data set brought to the newest revision (timed: what the upgrade costs at this
    size), then vacuumed as autovacuum would."""
    started = time.perf_counter()
    dms.upgrade(engine)
    log(f"data set: upgraded to the newest revision in {time.perf_counter() - started:.1f} s")
    vacuum(engine)


def vacuum(engine: Engine) -> None:
    """VACUUM ANALYZE the tenant's tables that reads and policies use."""
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'VACUUM ANALYZE "{SCHEMA}".documents')
        conn.exec_driver_sql(f'VACUUM ANALYZE "{SCHEMA}".document_search')
        # Vacuumed, not only analyzed: the triggers rewrote grants many times over, and an
        # index-only scan of access_grants would visit every dead row's heap page.
        tables = _tables("folders", "access_grants", "access_scopes", "access_entries")
        conn.exec_driver_sql(f"VACUUM ANALYZE {tables}, {_tables('access_group_members')}")


def _tables(*names: str) -> str:
    return ", ".join(f'"{SCHEMA}".{name}' for name in names)


def _email(n: int) -> str:
    return f"bench-{n}@example.org"


def _users(engine: Engine) -> list[uuid.UUID]:
    """Users 0..USERS-1 (0 the admin, 1 ``half``, 2 ``few``) and USERS, the newcomer."""
    users = users_stand_in("public")
    ids = [uuid.uuid4() for _ in range(USERS + 1)]
    with engine.begin() as conn:
        conn.execute(sa.delete(users).where(users.c.email.like("bench-%@example.org")))
        conn.execute(
            sa.insert(users),
            [{"id": i, "email": _email(n), "display_name": f"User {n}"} for n, i in enumerate(ids)],
        )
    return ids


def _group_names() -> list[str]:
    return [
        *(f"Team {n:02}" for n in range(TEAMS)),
        *(f"Division {n}" for n in range(DIVISIONS)),
        *(f"Project group {n:02}" for n in range(PROJECT_GROUPS)),
        STAFF,
        ADMINS,
    ]


def _memberships(users: list[uuid.UUID], groups: dict[str, uuid.UUID]) -> list[dict[str, Any]]:
    """Three groups a user and Staff; the measured users' groups chosen (module docstring)."""
    rows: list[tuple[int, str]] = [(0, ADMINS)]
    rows += [(1, f"Division {n}") for n in range(5)] + [(1, "Team 03"), (1, "Project group 40")]
    rows += [(2, f"Team {n:02}") for n in (10, 60, 61, 62, 63)]
    for n in range(3, USERS):
        rows += [
            (n, f"Team {n % TEAMS:02}"),
            (n, f"Division {n % DIVISIONS}"),
            (n, f"Project group {n % PROJECT_GROUPS:02}"),
        ]
    rows += [(n, STAFF) for n in range(USERS)]
    return [{"group_id": groups[g], "user_id": users[n]} for n, g in rows]


def _tree_and_groups(engine: Engine, users: list[uuid.UUID]) -> None:
    # As the admin (folders need a user), who holds every right at the root throughout.
    with UnitOfWork(engine, tenant=TENANT, user_id=users[0]) as uow:
        tops = uow.folders.add_many(
            [NewFolder(name=f"Department {d:02}", parent_id=None) for d in range(DEPARTMENTS)]
        )
        subs = uow.folders.add_many(
            [
                NewFolder(name=f"Project {d:02}-{p:02}", parent_id=top)
                for d, top in enumerate(tops)
                for p in range(PROJECTS)
            ]
        )
        groups = {name: uow.access.add_group(name).id for name in _group_names()}
        uow.connection.execute(sa.insert(t.access_group_members), _memberships(users, groups))
        uow.access.grant(ALL_RIGHTS, group_id=groups[ADMINS])
        uow.access.revoke()  # everyone's entry at the root
        team_rights = Rights.VIEW | Rights.EDIT | Rights.DELETE
        for d, top in enumerate(tops):
            project = [i for i in subs[d * PROJECTS : (d + 1) * PROJECTS] if i is not None]
            if d < GRANTED_DEPARTMENTS:
                uow.access.grant(team_rights, folder_id=top, group_id=groups[f"Team {d:02}"])
                uow.access.grant(Rights.VIEW, folder_id=top, group_id=groups[f"Division {d // 10}"])
            else:
                uow.access.grant(Rights.VIEW, folder_id=project[4], group_id=groups["Division 9"])
            cross = groups[f"Project group {d % PROJECT_GROUPS:02}"]
            uow.access.grant(Rights.VIEW | Rights.EDIT, folder_id=project[0], group_id=cross)
            uow.access.set_inherits(project[1], False)
            uow.access.grant(team_rights, folder_id=project[1], group_id=groups[f"Team {d:02}"])
            uow.access.grant(Rights.VIEW, folder_id=project[2], user_id=users[3 + d * 7])
            other = groups[f"Project group {(d + 44) % PROJECT_GROUPS:02}"]
            uow.access.grant(Rights.VIEW, folder_id=project[3], group_id=other)
        uow.commit()


#: Documents as superuser with triggers off (no audit events, no per-row trigger work), each
#: with the scope its folder gives it: what access_document_rules would set.
_INSERT_DOCUMENTS = """
INSERT INTO documents (id, folder_id, title, created_by, owner_id, access_scope)
SELECT gen_random_uuid(), f.id,
       (CAST(:kinds AS text[]))[1 + n % 40] || ' '
           || (CAST(:words AS text[]))[1 + (n * 7919) % 4096] || ' '
           || (CAST(:rare AS text[]))[1 + (n * 104729) % 65536] || ' '
           || (1990 + n % 37) || ' (' || n || ')',
       (CAST(:users AS uuid[]))[1 + n % :user_count], (CAST(:users AS uuid[]))[1 + n % :user_count],
       f.access_scope
  FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) n
  JOIN folders f ON f.id = (CAST(:folders AS uuid[]))[1 + n % :folder_count]
"""
#: The rows search_rebuild would write for a document without text: its title (weight A);
#: filters as search_filters_row would compute them (its folder and the one above), and its
#: scope and owner as search_access_row would copy them.
_INSERT_SEARCH_ROWS = """
INSERT INTO document_search (document_id, part_no, config, terms, filters, access_scope, owner_id)
SELECT d.id, 1, 'simple', setweight(to_tsvector('simple', search_fold(d.title)), 'A'),
       array_remove(ARRAY[d.folder_id, f.parent_id], NULL), d.access_scope, d.owner_id
  FROM documents d JOIN folders f ON f.id = d.folder_id
"""
_SECONDARY_INDEXES = """
SELECT i.indexname, i.indexdef FROM pg_indexes i
 WHERE i.schemaname = :schema AND i.tablename IN ('documents', 'document_search')
   AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                    WHERE c.conname = i.indexname AND c.connamespace = :schema ::regnamespace)
"""


def _vocabulary(syllables: int) -> list[str]:
    return ["".join(w) for w in itertools.product(SYLLABLES, repeat=syllables)]


def _documents(engine: Engine, users: list[uuid.UUID]) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(f'SET LOCAL search_path = "{SCHEMA}", public')
        conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
        conn.exec_driver_sql("SET LOCAL maintenance_work_mem = '512MB'")
        indexes = list(conn.execute(sa.text(_SECONDARY_INDEXES), {"schema": SCHEMA}))
        for name, _definition in indexes:
            conn.exec_driver_sql(f'DROP INDEX "{SCHEMA}"."{name}"')
        folders = list(
            conn.scalars(
                sa.text("SELECT id FROM folders WHERE parent_id IS NOT NULL ORDER BY name")
            )
        )
        vocabulary = {"kinds": list(KINDS), "words": _vocabulary(3), "rare": _vocabulary(4)}
        batch = 100_000
        for first in range(0, DOCUMENTS, batch):
            conn.execute(
                sa.text(_INSERT_DOCUMENTS),
                {
                    **vocabulary,
                    "users": users[:USERS],
                    "user_count": USERS,
                    "folders": folders,
                    "folder_count": len(folders),
                    "first": first,
                    "last": min(first + batch, DOCUMENTS) - 1,
                },
            )
        conn.execute(sa.text(_INSERT_SEARCH_ROWS))
        for _name, definition in indexes:
            conn.exec_driver_sql(definition)


def _share_documents(engine: Engine) -> None:
    """Staff's entries on single documents, through the triggers (each becomes a scope)."""
    with UnitOfWork(engine, tenant=TENANT, system="bench") as uow:
        staff = uow.connection.scalar(
            sa.select(t.access_groups.c.id).where(t.access_groups.c.name == STAFF)
        )
        chosen = (
            sa.select(t.documents.c.id, sa.literal(staff, sa.Uuid), sa.literal(int(Rights.VIEW)))
            .order_by(t.documents.c.id)
            .limit(SHARED_DOCUMENTS)
        )
        uow.connection.execute(
            sa.insert(t.access_entries).from_select(["document_id", "group_id", "rights"], chosen)
        )
        uow.commit()


def world(engine: Engine) -> World:
    """The ids of the built tenant, by name."""
    users = users_stand_in("public")
    with engine.connect() as conn:
        by_email = dict(
            conn.execute(
                sa.select(users.c.email, users.c.id).where(users.c.email.like("bench-%"))
            ).all()
        )
    with UnitOfWork(engine, tenant=TENANT, system="bench") as uow:
        folders = t.folders
        rows = uow.connection.execute(sa.select(folders.c.name, folders.c.id)).all()
        by_name = dict(rows)
        groups = dict(
            uow.connection.execute(sa.select(t.access_groups.c.name, t.access_groups.c.id)).all()
        )
    return World(
        admin=by_email[_email(0)],
        half=by_email[_email(1)],
        few=by_email[_email(2)],
        newcomer=by_email[_email(USERS)],
        departments=[by_name[f"Department {d:02}"] for d in range(DEPARTMENTS)],
        projects=[
            [by_name[f"Project {d:02}-{p:02}"] for p in range(PROJECTS)] for d in range(DEPARTMENTS)
        ],
        staff=groups[STAFF],
        team=[groups[f"Team {d:02}"] for d in range(TEAMS)],
    )


# --- checks ---------------------------------------------------------------------------------

#: Rows whose scope is neither their folder's nor their own (a document with entries): none.
_MISPLACED = """
SELECT count(*) FROM documents d JOIN folders f ON f.id = d.folder_id
 WHERE d.access_scope <> f.access_scope AND d.access_scope <> d.id
"""
#: What a user may view, from the entries and the folder tree alone (no scope, no grant): a
#: folder's chain up to the root, cut after a folder that stops inheriting; the user's
#: principals' view entries on any folder of it (or on the root, if reached); its documents,
#: those shared with a principal one by one, and those the user owns.
_EXPECTED_VISIBLE = """
WITH RECURSIVE principals (id) AS (
    SELECT '00000000-0000-0000-0000-000000000000'::uuid UNION SELECT :user
    UNION SELECT group_id FROM access_group_members WHERE user_id = :user
), chain (folder, above, reached_root) AS (
    SELECT f.id, f.id, false FROM folders f
    UNION ALL
    SELECT c.folder, f.parent_id, f.parent_id IS NULL
      FROM chain c JOIN folders f ON f.id = c.above
     WHERE f.inherits AND NOT c.reached_root
), granted (id) AS (
    SELECT e.folder_id FROM access_entries e JOIN principals p ON p.id = coalesce(e.user_id, e.group_id, '00000000-0000-0000-0000-000000000000') WHERE e.rights & 1 = 1
), root_granted AS (
    SELECT EXISTS (SELECT 1 FROM access_entries e JOIN principals p ON p.id = coalesce(e.user_id, e.group_id, '00000000-0000-0000-0000-000000000000')
                    WHERE e.folder_id IS NULL AND e.document_id IS NULL AND e.rights & 1 = 1) AS yes
), visible_folders AS (
    SELECT DISTINCT c.folder FROM chain c
     WHERE c.above IN (SELECT id FROM granted) OR (c.reached_root AND (SELECT yes FROM root_granted))
)
SELECT count(*) FROM documents d
 WHERE d.folder_id IN (SELECT folder FROM visible_folders) OR d.owner_id = :user
    OR d.id IN (SELECT e.document_id FROM access_entries e JOIN principals p ON p.id = coalesce(e.user_id, e.group_id, '00000000-0000-0000-0000-000000000000')
                 WHERE e.rights & 1 = 1)
"""  # noqa: E501


def check(engine: Engine, app: Engine, w: World) -> dict[str, tuple[int, int]]:
    """Scopes as the triggers would have them; visible counts as the model says (else exit)."""
    with engine.begin() as conn:
        conn.exec_driver_sql(f'SET LOCAL search_path = "{SCHEMA}", public')
        misplaced = conn.scalar(sa.text(_MISPLACED))
        own = conn.scalar(sa.text("SELECT count(*) FROM documents WHERE access_scope = id"))
        expected = {
            name: int(conn.scalar(sa.text(_EXPECTED_VISIBLE), {"user": user}) or 0)
            for name, user in (("half", w.half), ("few", w.few))
        }
    if misplaced or own != SHARED_DOCUMENTS:
        raise SystemExit(f"scopes wrong: {misplaced} misplaced, {own} documents with own scope")
    counts: dict[str, tuple[int, int]] = {}
    for name, user in (("half", w.half), ("few", w.few)):
        with UnitOfWork(app, tenant=TENANT, user_id=user) as uow:
            seen = uow.connection.scalar(sa.select(sa.func.count()).select_from(t.documents)) or 0
        if seen != expected[name]:
            raise SystemExit(
                f"user {name} sees {seen:,} documents, the model says {expected[name]:,}"
            )
        counts[name] = (seen, expected[name])
    return counts


# --- reads ----------------------------------------------------------------------------------


def read_cases(w: World) -> list[ReadCase]:
    """Department 10 is visible to both users (division 1, team 10)."""
    department, project = w.departments[10], w.projects[10][50]
    return [
        ReadCase("no filter", DocumentQuery(), later_pages=True),
        ReadCase("folder subtree (10,000 docs)", DocumentQuery(folder_id=department), True),
        ReadCase(
            "folder, direct (~100 docs)",
            DocumentQuery(folder_id=project, include_subfolders=False),
        ),
        ReadCase("title_contains, common (2.5 %)", DocumentQuery(title_contains="invoice")),
        ReadCase("title_contains, rare", DocumentQuery(title_contains="kalomine")),
        ReadCase("text, common (2.5 %)", DocumentQuery(text="invoice")),
        ReadCase("text, rare", DocumentQuery(text="kalomiru")),
        ReadCase("text + folder subtree", DocumentQuery(text="contract", folder_id=department)),
    ]


def _timed_search(
    principal: Principal, query: DocumentQuery, after: Cursor | None
) -> tuple[float, Page[Document]]:
    with principal.unit_of_work() as uow:
        uow.connection  # noqa: B018 (connect and name the actor before the clock starts)
        started = time.perf_counter()
        page = uow.documents.search(query, limit=PAGE, after=after)
        return (time.perf_counter() - started) * 1000, page


def measure_reads(principals: list[Principal], cases: list[ReadCase], reps: int) -> Timings:
    """Each case ``reps`` times, principals in turn (the first of each turn rotating)."""
    timings = Timings()
    for rep in range(reps + 1):  # the first round warms the caches and is not kept
        for case in cases:
            turn = principals[rep % len(principals) :] + principals[: rep % len(principals)]
            for principal in turn:
                ms, page = _timed_search(principal, case.query, None)
                if rep:
                    timings.add(principal.name, case.name, ms)
                for _ in range(LATER_PAGES if case.later_pages else 0):
                    if page.next_cursor is None:
                        break
                    ms, page = _timed_search(principal, case.query, page.next_cursor)
                    if rep:
                        timings.add(principal.name, f"{case.name}, pages 2-{LATER_PAGES + 1}", ms)
    return timings


def explain(principal: Principal, query: DocumentQuery) -> list[str]:
    """EXPLAIN (ANALYZE, BUFFERS) of the first page, as the principal (dms.actor set)."""
    with principal.unit_of_work() as uow:
        statement = uow.documents.search_statement(query, limit=PAGE)
        return [str(line) for line in uow.connection.execute(Explain(statement)).scalars()]


# --- writes and changes ---------------------------------------------------------------------


class StatementCounter:
    """Counts the statements an engine sends."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        self.count = 0
        for engine in engines:
            sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_args: object) -> None:
        self.count += 1


@dataclass
class WriteTimings:
    """Microseconds and statements per call, per principal and write."""

    us: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    statements: dict[str, int] = field(default_factory=dict)


def _writes(uow: UnitOfWork, folder: uuid.UUID) -> list[tuple[str, Callable[[], object]]]:
    """Adding a document to ``folder``, renaming one of it."""
    target = uow.documents.search(DocumentQuery(folder_id=folder), limit=1).items[0]
    return [
        (
            "add a document",
            lambda: uow.documents.add(title=f"new {uuid.uuid4()}", folder_id=folder),
        ),
        (
            "rename a document",
            lambda: uow.documents.rename(
                target.id, title=f"renamed {uuid.uuid4()}", version=target.version
            ),
        ),
    ]


def measure_writes(
    principals: list[Principal], folder: uuid.UUID, reps: int, counter: StatementCounter
) -> WriteTimings:
    """Each write in a unit of work (rolled back), principals in turn; the first round unkept."""
    result = WriteTimings()
    for rep in range(reps + 1):
        for principal in principals:
            with principal.unit_of_work() as uow:
                for write, call in _writes(uow, folder):
                    before = counter.count
                    started = time.perf_counter()
                    call()
                    elapsed = (time.perf_counter() - started) * 1e6
                    result.statements[write] = counter.count - before
                    if rep:
                        result.us.setdefault((principal.name, write), []).append(elapsed)
    return result


def _timed_change(principal: Principal, change: Callable[[UnitOfWork], object]) -> float:
    """Seconds of ``change`` in a unit of work that is then rolled back."""
    with principal.unit_of_work() as uow:
        uow.connection  # noqa: B018
        started = time.perf_counter()
        change(uow)
        return time.perf_counter() - started


def measure_changes(admin: Principal, w: World, reps: int) -> list[tuple[str, list[float]]]:
    """Moves, a first entry, memberships: as the admin user, each rolled back."""
    within, into, scope = w.departments[96], w.departments[95], w.departments[20]
    changes: list[tuple[str, Callable[[UnitOfWork], object]]] = [
        (
            "move a department (10,000 docs) within one scope (the root's): no scope changes",
            lambda uow: uow.folders.move(within, parent_id=w.departments[97]),
        ),
        (
            "move a department (10,000 docs) into another scope: ~9,600 docs repointed",
            lambda uow: uow.folders.move(into, parent_id=w.departments[20]),
        ),
        (
            "move a department that is a scope: its 5 scopes' grants recomputed",
            lambda uow: uow.folders.move(scope, parent_id=w.departments[21]),
        ),
        (
            "first entry on a department (10,000 docs): it becomes a scope, rows repointed",
            lambda uow: uow.access.grant(Rights.VIEW, folder_id=into, group_id=w.team[95]),
        ),
        (
            "add a member to Staff (4,999 members, 5,000 entries)",
            lambda uow: uow.access.add_member(w.staff, w.newcomer),
        ),
        (
            "add a member to a team (50 members, 2 entries)",
            lambda uow: uow.access.add_member(w.team[5], w.newcomer),
        ),
    ]
    found: list[tuple[str, list[float]]] = []
    for name, change in changes:
        _timed_change(admin, change)
        found.append((name, [_timed_change(admin, change) for _ in range(reps)]))
    return found


# --- the run --------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1/postgres")
    parser.add_argument("--database", default="dms_bench_access")
    parser.add_argument("--rebuild", action="store_true", help="build the data set again")
    parser.add_argument("--reps", type=int, default=11, help="timed runs of each read")
    parser.add_argument("--write-reps", type=int, default=30, help="timed writes of each kind")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS}")
    args = parser.parse_args(argv)
    lines = run(args)
    print("\n".join(lines))
    if args.write:
        RESULTS.write_text("\n".join(lines) + "\n")


def run(args: argparse.Namespace) -> list[str]:
    server = make_url(args.url).set(drivername="postgresql+psycopg")
    out = [f"# Access control, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", ""]
    log = _logger(out)
    engine = database_engine(server, args.database)
    with engine.connect() as conn:
        version = conn.scalar(sa.text("SHOW server_version"))
    log(f"server: PostgreSQL {version}; {multiprocessing.cpu_count()} cores; "
        f"load average {_load()} at the start")  # fmt: skip
    if args.rebuild or not built(engine):
        build(engine, log)
    else:
        log(f"data set: reused from database {args.database}")
        upgrade(engine, log)
    w = world(engine)
    app = application_engine(engine, [TENANT], poolclass=sa.pool.QueuePool, pool_size=4)
    counts = check(engine, app, w)
    for name, (seen, _expected) in counts.items():
        log(f"user {name} sees {seen:,} documents ({seen / DOCUMENTS:.1%}), as the model says")
    principals = [
        Principal("superuser", engine, system="bench"),
        Principal("system", app, system="bench"),
        Principal("user 50 %", app, user_id=w.half),
        Principal("user 5 %", app, user_id=w.few),
    ]
    cases = read_cases(w)
    started = time.perf_counter()
    reads = measure_reads(principals, cases, args.reps)
    log(f"reads: {args.reps} timed rounds in {time.perf_counter() - started:.0f} s")
    out += _reads_table(reads, principals)
    worst = max(cases, key=lambda c: _ratio(reads, "user 50 %", c.name, 95))
    out += _plans(worst, principals)
    print("\n".join(out[-len(cases) * 2 - 30 :]), flush=True)
    counter = StatementCounter([engine, app])
    # The same user, the same triggers; row-level security applies to the application role
    # only. (A system principal cannot add a document: a new document needs a user.)
    writers = [
        Principal("superuser", engine, user_id=w.few),
        Principal("user 5 %", app, user_id=w.few),
    ]
    out += _writes_table(measure_writes(writers, w.projects[10][60], args.write_reps, counter))
    admin = Principal("admin", app, user_id=w.admin)
    out += _changes_table(measure_changes(admin, w, 2))
    log(f"load average {_load()} at the end")
    app.dispose()
    engine.dispose()
    return out


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _logger(out: list[str]) -> Callable[[str], None]:
    def log(line: str) -> None:
        print(line, flush=True)
        out.append(f"- {line}")

    return log


def _ratio(reads: Timings, principal: str, case: str, q: int, baseline: str = "superuser") -> float:
    return reads.p(principal, case, q) / reads.p(baseline, case, q)


def _reads_table(reads: Timings, principals: list[Principal]) -> list[str]:
    names = [p.name for p in principals]
    lines = [
        "",
        f"## Reads, ms (a page of {PAGE}; p50 / p95)",
        "",
        "| read | "
        + " | ".join(names)
        + " | 50 % / superuser | 5 % / superuser | 50 % / system | 5 % / system |",
        "|---|" + "---:|" * (len(names) + 4),
    ]
    cases = sorted(
        {case for _, case in reads.ms}, key=list(dict.fromkeys(c for _, c in reads.ms)).index
    )
    for case in cases:
        cells = [f"{reads.p(n, case, 50):.1f} / {reads.p(n, case, 95):.1f}" for n in names]
        ratios = [
            f"{_ratio(reads, user, case, 50, base):.2f} / {_ratio(reads, user, case, 95, base):.2f}"
            for base in ("superuser", "system")
            for user in ("user 50 %", "user 5 %")
        ]
        lines.append(f"| {case} | " + " | ".join(cells + ratios) + " |")
    return lines


def _plans(case: ReadCase, principals: list[Principal]) -> list[str]:
    lines = ["", f"## Plans of the read with the highest ratio: {case.name}", ""]
    for principal in principals[1:3]:
        lines += [f"As {principal.name}:", "", "```"]
        lines += explain(principal, case.query)
        lines += ["```", ""]
    return lines


def _writes_table(timings: WriteTimings) -> list[str]:
    lines = [
        "",
        "## Writes, µs per call (p50 / p95), in a unit of work of the user who sees 5 %",
        "",
        "| write | statements | superuser (the triggers, no row-level security) "
        "| application role (the triggers and the policies) | policies per statement (p50) |",
        "|---|---:|---:|---:|---:|",
    ]
    for write, statements in timings.statements.items():
        cells = []
        for name in ("superuser", "user 5 %"):
            values = timings.us[(name, write)]
            cells.append(f"{statistics.median(values):,.0f} / {_p95(values):,.0f}")
        extra = statistics.median(timings.us[("user 5 %", write)]) - statistics.median(
            timings.us[("superuser", write)]
        )
        lines.append(
            f"| {write} | {statements} | " + " | ".join(cells) + f" | {extra / statements:,.0f} |"
        )
    return lines


def _changes_table(changes: list[tuple[str, list[float]]]) -> list[str]:
    lines = [
        "",
        "## Changes, as a user with every right at the root (each rolled back), ms",
        "",
        "| change | runs | median | min |",
        "|---|---:|---:|---:|",
    ]
    for name, seconds in changes:
        lines.append(
            f"| {name} | {len(seconds)} | {statistics.median(seconds) * 1000:,.1f} | "
            f"{min(seconds) * 1000:,.1f} |"
        )
    return lines


if __name__ == "__main__":
    main()
