"""Load N documents with revisions, tags and metadata into one tenant; time the hot queries.

    python bench/documents.py --documents 100000 [--url postgresql://...]

Prints the load rate; keyset page 1 vs page 500 of a 10,000-document folder (medians of
alternating calls, wall and server time, and the ratios); the timings and plans of tag queries
and a metadata range query. Creates a throw-away tenant and drops it (unless ``--keep``).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import date, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import ClauseElement, Executable

import dms
from dms import DocumentQuery, MetadataFilter, UnitOfWork, tenancy
from dms.domain import Cursor
from dms.schema import tenant as t
from dms.services import define_field, search_documents
from dms.users import create_user, create_users_stand_in

BATCH = 5000
TAGS = 50
FOLDERS = 100
PAGE_SIZE = 20
#: Calls of each statement before timing: past psycopg's prepare_threshold (5), so that the
#: timed calls all run the server-side prepared statement.
PREPARE_WARMUP = 10


class Explain(Executable, ClauseElement):
    """``EXPLAIN (ANALYZE, BUFFERS)`` of a Core statement, routed like the statement itself."""

    inherit_cache = False

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement


class VacuumAnalyze(Executable, ClauseElement):
    """``VACUUM (ANALYZE)`` of one table, routed to the tenant's schema."""

    inherit_cache = False

    def __init__(self, table: sa.Table) -> None:
        self.table = table


@compiles(VacuumAnalyze)
def _compile_vacuum_analyze(element: VacuumAnalyze, compiler: SQLCompiler, **kw: Any) -> str:
    return "VACUUM (ANALYZE) " + compiler.preparer.format_table(element.table)


@compiles(Explain)
def _compile_explain(element: Explain, compiler: SQLCompiler, **kw: Any) -> str:
    return "EXPLAIN (ANALYZE, BUFFERS) " + compiler.process(element.statement, **kw)


def batches(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


def setup(engine: Engine, tenant: str, user_id: uuid.UUID) -> dict[str, Any]:
    with UnitOfWork(engine, tenant=tenant, user_id=user_id) as uow:
        big = uow.folders.add(name="Big")
        folders = [uow.folders.add(name=f"F{n}").id for n in range(FOLDERS)]
        tags = [uow.tags.add(name=f"tag{n}").id for n in range(TAGS)]
        amount = define_field(uow, name="Amount", field_type="int")
        due = define_field(uow, name="Due", field_type="date")
        uow.commit()
    return {"big": big.id, "folders": folders, "tags": tags, "amount": amount, "due": due}


def load(conn: Connection, n: int, folder_size: int, ids: dict[str, Any], user: uuid.UUID) -> None:
    for chunk in batches(n, BATCH):
        docs = [
            {
                "title": f"Document {i:07}.pdf",
                "folder_id": ids["big"] if i < folder_size else ids["folders"][i % FOLDERS],
                "created_by": user,
            }
            for i in chunk
        ]
        doc_ids = list(
            conn.execute(sa.insert(t.documents).returning(t.documents.c.id), docs).scalars()
        )
        load_children(conn, list(chunk), doc_ids, ids, user)


def load_children(
    conn: Connection,
    numbers: Sequence[int],
    doc_ids: Sequence[uuid.UUID],
    ids: dict[str, Any],
    user: uuid.UUID,
) -> None:
    revisions = [
        {
            "document_id": d,
            "storage_key": f"blobs/{d}",
            "sha256": hashlib.sha256(d.bytes).hexdigest(),
            "size_bytes": 1000 + i,
            "mime_type": "application/pdf",
            "uploaded_by": user,
        }
        for i, d in zip(numbers, doc_ids, strict=True)
    ]
    conn.execute(sa.insert(t.file_revisions), revisions)
    r = t.file_revisions
    conn.execute(
        sa.update(t.documents)
        .where(r.c.document_id == t.documents.c.id, t.documents.c.id.in_(doc_ids))
        .values(current_revision_id=r.c.id)
    )
    tags = ids["tags"]
    links = [
        {"document_id": d, "tag_id": tags[(i + k) % TAGS]}
        for i, d in zip(numbers, doc_ids, strict=True)
        for k in (0, 7)
    ]
    conn.execute(sa.insert(t.document_tags), links)
    pairs = list(zip(numbers, doc_ids, strict=True))
    amount, due = ids["amount"].id, ids["due"].id
    ints = [
        {"document_id": d, "field_id": amount, "field_type": "int", "value_int": i}
        for i, d in pairs
    ]
    dates = [
        {
            "document_id": d,
            "field_id": due,
            "field_type": "date",
            "value_date": date(2020, 1, 1) + timedelta(days=i % 2000),
        }
        for i, d in pairs
    ]
    for values in (ints, dates):
        conn.execute(sa.insert(t.document_metadata), values)


def timed(fn: Callable[[], object], repeat: int = 5) -> float:
    """Median wall time of ``repeat`` calls of ``fn``, after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def timed_pair(
    first: Callable[[], object], second: Callable[[], object], rounds: int
) -> tuple[float, float]:
    """Median wall times of ``first`` and ``second``, called alternately ``rounds`` times.

    Alternating puts both under the same load of a shared machine; a few sequential samples of
    one then the other measured the neighbours, not the queries. Both statements are warmed up
    first, past psycopg's prepare threshold, so that neither pays for its PREPARE.
    """
    for _ in range(PREPARE_WARMUP):
        first()
        second()
    a: list[float] = []
    b: list[float] = []
    for _ in range(rounds):
        for fn, samples in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def explain(uow: UnitOfWork, statement: ClauseElement) -> list[str]:
    """The ``EXPLAIN (ANALYZE, BUFFERS)`` lines of ``statement``."""
    return list(uow.connection.execute(Explain(statement)).scalars())


def execution_ms(plan: Sequence[str]) -> float:
    """The server's execution time in a plan printed by :func:`explain`."""
    line = next(line for line in plan if line.startswith("Execution Time:"))
    return float(line.split()[2])


def server_ms(uow: UnitOfWork, statement: ClauseElement, repeat: int) -> float:
    """Median server-side execution time of ``statement`` over ``repeat`` EXPLAIN ANALYZE."""
    return statistics.median(execution_ms(explain(uow, statement)) for _ in range(repeat))


def show(plan: Sequence[str]) -> None:
    print("\n".join("    " + line for line in plan))


def cursor_of_page(uow: UnitOfWork, query: DocumentQuery, page: int) -> Cursor | None:
    cursor = None
    for _ in range(page - 1):
        cursor = uow.documents.search(query, limit=PAGE_SIZE, after=cursor).next_cursor
    return cursor


def report_pages(uow: UnitOfWork, ids: dict[str, Any], folder_size: int, rounds: int) -> None:
    folder = DocumentQuery(folder_id=ids["big"], include_subfolders=False)
    last_page = max(folder_size // PAGE_SIZE, 1)
    after = cursor_of_page(uow, folder, last_page)
    first, late = timed_pair(
        lambda: uow.documents.search(folder, limit=PAGE_SIZE),
        lambda: uow.documents.search(folder, limit=PAGE_SIZE, after=after),
        rounds,
    )
    search = uow.documents.search_statement
    first_statement = search(folder, limit=PAGE_SIZE)
    late_statement = search(folder, limit=PAGE_SIZE, after=after)
    first_server = server_ms(uow, first_statement, rounds)
    late_server = server_ms(uow, late_statement, rounds)
    print(
        f"page 1 vs page {last_page} of a {folder_size}-document folder "
        f"(medians of {rounds} alternating calls):\n"
        f"  wall:   page 1 {first * 1000:.3f} ms, page {last_page} {late * 1000:.3f} ms, "
        f"ratio {late / first:.2f}\n"
        f"  server: page 1 {first_server:.3f} ms, page {last_page} {late_server:.3f} ms, "
        f"ratio {late_server / first_server:.2f}"
    )
    print("  plan of page 1:")
    show(explain(uow, first_statement))
    print(f"  plan of page {last_page}:")
    show(explain(uow, late_statement))


def report_queries(uow: UnitOfWork, ids: dict[str, Any], rounds: int) -> None:
    tags = ids["tags"]
    queries = {
        "tag query (tags_all={tag3})": DocumentQuery(tags_all=frozenset({tags[3]})),
        "tag query (tags_all={tag3, tag10})": DocumentQuery(
            tags_all=frozenset({tags[3], tags[10]})
        ),
        "tag query (tags_any={tag3, tag4})": DocumentQuery(tags_any=frozenset({tags[3], tags[4]})),
        "metadata range (1000 <= Amount <= 1100)": DocumentQuery(
            metadata=(MetadataFilter(field_id=ids["amount"].id, at_least=1000, at_most=1100),)
        ),
    }
    fields = {ids["amount"].id: ids["amount"]}
    for name, query in queries.items():
        elapsed = timed(lambda q=query: search_documents(uow, q, limit=50), rounds)  # type: ignore[misc]
        statement = uow.documents.search_statement(query, fields=fields, limit=50)
        plan = explain(uow, statement)
        print(
            f"{name}: wall {elapsed * 1000:.2f} ms, "
            f"server {server_ms(uow, statement, rounds):.2f} ms (medians of {rounds})"
        )
        show(plan)


def report(engine: Engine, tenant: str, ids: dict[str, Any], folder_size: int, rounds: int) -> None:
    with UnitOfWork(engine, tenant=tenant) as uow:
        report_pages(uow, ids, folder_size, rounds)
        report_queries(uow, ids, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--folder-size", type=int, default=10_000)
    parser.add_argument("--url", default=None, help="database URL (default: DMS_DATABASE_URL)")
    parser.add_argument(
        "--rounds", type=int, default=31, help="timed calls per query (medians are printed)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the tenant afterwards, to investigate plans"
    )
    args = parser.parse_args()
    engine = dms.create_engine(args.url)
    create_users_stand_in(engine)
    dms.upgrade(engine)
    tenant = f"bench{uuid.uuid4().hex[:8]}"
    dms.create_tenant(engine, tenant)
    try:
        with engine.begin() as conn:
            user = create_user(conn, email=f"{tenant}@example.org", display_name="Bench")
        ids = setup(engine, tenant, user)
        folder_size = min(args.folder_size, args.documents)
        start = time.perf_counter()
        with UnitOfWork(engine, tenant=tenant, user_id=user) as uow:
            load(uow.connection, args.documents, folder_size, ids, user)
            uow.commit()
        elapsed = time.perf_counter() - start
        print(
            f"loaded {args.documents} documents (+1 revision, 2 tags, 2 values each) "
            f"in {elapsed:.1f} s: {args.documents / elapsed:.0f} documents/s"
        )
        vacuum_analyze(engine, tenant)
        report(engine, tenant, ids, folder_size, args.rounds)
    finally:
        if args.keep:
            print(f"kept tenant {tenant!r}")
        else:
            dms.drop_tenant(engine, tenant)


def vacuum_analyze(engine: Engine, tenant: str) -> None:
    # Fresh statistics and visibility map, as autovacuum would have after a real load: without
    # the visibility map no index-only scan is possible, and the plans would not be the ones a
    # live tenant gets. VACUUM cannot run in a transaction block, hence AUTOCOMMIT.
    with engine.connect() as conn:
        routed = tenancy.route(conn.execution_options(isolation_level="AUTOCOMMIT"), tenant)
        for table in (t.documents, t.document_tags, t.document_metadata, t.file_revisions):
            routed.execute(VacuumAnalyze(table))


if __name__ == "__main__":
    main()
