"""Load N documents with revisions, tags and metadata into one tenant; time the hot queries.

    python bench/documents.py --documents 100000 [--url postgresql://...]

Prints the load rate, keyset page 1 vs page 500 of a 10,000-document folder, and the timings
and plans of a tag query and a metadata range query. Creates a throw-away tenant and drops it.
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
from dms import DocumentQuery, MetadataFilter, UnitOfWork
from dms.domain import Cursor
from dms.schema import tenant as t
from dms.users import create_user, create_users_stand_in

BATCH = 5000
TAGS = 50
FOLDERS = 100
PAGE_SIZE = 20


class Explain(Executable, ClauseElement):
    """``EXPLAIN (ANALYZE, BUFFERS)`` of a Core statement, routed like the statement itself."""

    inherit_cache = False

    def __init__(self, statement: ClauseElement) -> None:
        self.statement = statement


class Analyze(Executable, ClauseElement):
    """``ANALYZE`` of one table, routed to the tenant's schema."""

    inherit_cache = False

    def __init__(self, table: sa.Table) -> None:
        self.table = table


@compiles(Analyze)
def _compile_analyze(element: Analyze, compiler: SQLCompiler, **kw: Any) -> str:
    return "ANALYZE " + compiler.preparer.format_table(element.table)


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
        amount = uow.metadata.define_field(name="Amount", field_type="int")
        due = uow.metadata.define_field(name="Due", field_type="date")
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
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def cursor_of_page(uow: UnitOfWork, query: DocumentQuery, page: int) -> Cursor | None:
    cursor = None
    for _ in range(page - 1):
        cursor = uow.documents.search(query, limit=PAGE_SIZE, after=cursor).next_cursor
    return cursor


def report(engine: Engine, tenant: str, ids: dict[str, Any], folder_size: int) -> None:
    with UnitOfWork(engine, tenant=tenant) as uow:
        folder = DocumentQuery(folder_id=ids["big"], include_subfolders=False)
        last_page = max(folder_size // PAGE_SIZE, 1)
        after = cursor_of_page(uow, folder, last_page)
        first = timed(lambda: uow.documents.search(folder, limit=PAGE_SIZE))
        late = timed(lambda: uow.documents.search(folder, limit=PAGE_SIZE, after=after))
        print(
            f"page 1: {first * 1000:.2f} ms, page {last_page}: {late * 1000:.2f} ms, "
            f"ratio {late / first:.2f}"
        )
        page_plan = uow.connection.execute(
            Explain(uow.documents.search_statement(folder, limit=PAGE_SIZE, after=after))
        )
        print("\n".join("    " + line for line in page_plan.scalars()))
        queries = {
            "tag query (tags_all={tag3})": DocumentQuery(tags_all=frozenset({ids["tags"][3]})),
            "metadata range (1000 <= Amount <= 1100)": DocumentQuery(
                metadata=(MetadataFilter(field_id=ids["amount"].id, at_least=1000, at_most=1100),)
            ),
        }
        for name, query in queries.items():
            elapsed = timed(lambda q=query: uow.documents.search(q, limit=50))  # type: ignore[misc]
            print(f"{name}: {elapsed * 1000:.2f} ms")
            plan = uow.connection.execute(Explain(uow.documents.search_statement(query, limit=50)))
            print("\n".join("    " + line for line in plan.scalars()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--folder-size", type=int, default=10_000)
    parser.add_argument("--url", default=None, help="database URL (default: DMS_DATABASE_URL)")
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
        analyze(engine, tenant)
        report(engine, tenant, ids, folder_size)
    finally:
        dms.drop_tenant(engine, tenant)


def analyze(engine: Engine, tenant: str) -> None:
    # Fresh statistics, as autovacuum would have after a real load.
    with UnitOfWork(engine, tenant=tenant) as uow:
        for table in (t.documents, t.document_tags, t.document_metadata, t.file_revisions):
            uow.connection.execute(Analyze(table))
        uow.commit()


if __name__ == "__main__":
    main()
