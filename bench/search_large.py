"""Searches of large real documents once analyzed, with and without the GIN pending list.

    python bench/search_large.py [--url URL] [--documents 2000] [--queries 20]

Loads ``--documents`` documents, each one part of up to 15,900 characters of the machine's own
documentation (``/usr/share/doc``: changelogs, manuals, licences, gzip'd or not), into two new
tenants of a temporary database on the server of ``--url``, in the same run: one as a tenant is
created now (its GIN indexes keep no pending list), one with ``fastupdate = on`` set back on them
before the load (as before revision 0033). Both are analyzed, as autovacuum's analyze would,
and not vacuumed. Then, for words that match nothing, words of a few documents and pairs of
common words drawn from the corpus, it times ``SELECT document_id FROM document_search WHERE
terms @@ plainto_tsquery(...)`` with ``EXPLAIN ANALYZE`` (execution time, the plan's top node)
on each tenant, and prints the p50 per class, the load times and the indexes' sizes. Not a test:
the machine is shared; compare the two tenants of one run.
"""

from __future__ import annotations

import argparse
import gzip
import random
import statistics
import time
import uuid
from collections import Counter
from pathlib import Path

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import Engine

import dms
from dms import tenancy
from dms.migrations.catalog import PG_CLASS, PG_NAMESPACE
from dms.schema.ddl import execute_ddl
from dms.testing.databases import temporary_database
from dms.testing.texts import add_extracted_documents
from dms.users import create_user, create_users_stand_in

PART_CHARS = 15_900
GIN_INDEXES = (
    "ix_document_search_terms_filters",
    "ix_document_search_own_scope",
    "ix_documents_title_trgm",
)


def corpus(limit: int) -> list[str]:
    """Texts of the machine's documentation, the longest first, each cut to one part."""
    texts = []
    for path in sorted(Path("/usr/share/doc").rglob("*")):
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
            text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
        except (OSError, UnicodeDecodeError, gzip.BadGzipFile, EOFError):
            continue
        if len(text) > 2_000:
            texts.append(text.replace("\x00", "")[:PART_CHARS])
    if not texts:
        raise SystemExit("no documentation under /usr/share/doc to load")
    texts.sort(key=len, reverse=True)
    return [texts[n % len(texts)] for n in range(limit)]


def load(engine: Engine, tenant: str, user: uuid.UUID, texts: list[str]) -> float:
    """Create a document per text with its extracted text; the seconds taken."""
    started = time.perf_counter()
    for start in range(0, len(texts), 200):
        batch = [[text] for text in texts[start : start + 200]]
        add_extracted_documents(engine, tenant, user, batch, first=start)
    return time.perf_counter() - started


def queries(texts: list[str], per_class: int) -> dict[str, list[str]]:
    """Words of no document, words of 2 to 10 documents, and pairs of words of half of them."""
    seen: Counter[str] = Counter()
    for text in texts:
        seen.update({w.lower() for w in text.split() if w.isalpha() and 4 <= len(w) <= 12})
    rng = random.Random(46)
    few = [w for w, n in seen.items() if 2 <= n <= 10]
    common = [w for w, n in seen.items() if n >= len(texts) // 2]
    return {
        "no match": [f"nosuchword{n}" for n in range(per_class)],
        "few documents": rng.sample(few, min(per_class, len(few))),
        "two common words": [" ".join(rng.sample(common, 2)) for _ in range(per_class)],
    }


def timed(engine: Engine, schema: str, words: str) -> tuple[float, str]:
    """Execution time (ms) and top scan node of the search for ``words`` in ``schema``."""
    query = sql.SQL(
        "EXPLAIN (ANALYZE, FORMAT JSON) SELECT document_id FROM {}.document_search"
        " WHERE terms @@ plainto_tsquery('simple', {})"
    ).format(sql.Identifier(schema), sql.Literal(words))
    with engine.connect() as conn:
        (plan,) = conn.exec_driver_sql(query.as_string(conn.connection.driver_connection)).one()
    return float(plan[0]["Execution Time"]), str(plan[0]["Plan"]["Node Type"])


def index_bytes(engine: Engine, schema: str) -> int:
    """The size of the tenant's GIN indexes."""
    with engine.connect() as conn:
        total = conn.scalar(
            sa.select(sa.func.sum(sa.func.pg_relation_size(PG_CLASS.c.oid)))
            .join_from(PG_CLASS, PG_NAMESPACE, PG_NAMESPACE.c.oid == PG_CLASS.c.relnamespace)
            .where(PG_NAMESPACE.c.nspname == schema, PG_CLASS.c.relname.in_(GIN_INDEXES))
        )
    return int(total or 0)


def run(engine: Engine, documents: int, per_class: int) -> None:
    create_users_stand_in(engine)
    dms.upgrade(engine)
    texts = corpus(documents)
    with engine.begin() as conn:
        user = create_user(conn, email="bench@example.org", display_name="Bench")
    tenants = {"no pending list (now)": "nowlist", "pending list (before 0033)": "pending"}
    loads = {}
    for label, tenant in tenants.items():
        dms.create_tenant(engine, tenant)
        schema = tenancy.schema_name(tenant)
        if tenant == "pending":
            with engine.begin() as conn:
                for index in GIN_INDEXES:
                    execute_ddl(
                        conn,
                        sql.SQL("ALTER INDEX {}.{} SET (fastupdate = on)").format(
                            sql.Identifier(schema), sql.Identifier(index)
                        ),
                    )
        loads[label] = load(engine, tenant, user, texts)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f'ANALYZE "{schema}".document_search')
    print(f"{documents} documents of up to {PART_CHARS} characters from /usr/share/doc")
    print("| tenant | load s | GIN indexes MiB |")
    print("|---|---:|---:|")
    for label, tenant in tenants.items():
        size = index_bytes(engine, tenancy.schema_name(tenant)) / 2**20
        print(f"| {label} | {loads[label]:.1f} | {size:.1f} |")
    print("\n| queries | tenant | p50 ms | max ms | plans |")
    print("|---|---|---:|---:|---|")
    for name, batch in queries(texts, per_class).items():
        for label, tenant in tenants.items():
            results = [timed(engine, tenancy.schema_name(tenant), words) for words in batch]
            times = [ms for ms, _ in results]
            plans = Counter(node for _, node in results)
            shown = ", ".join(f"{node} {count}" for node, count in plans.most_common())
            print(
                f"| {name} | {label} | {statistics.median(times):.2f} | {max(times):.2f} "
                f"| {shown} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--documents", type=int, default=2_000)
    parser.add_argument("--queries", type=int, default=20, help="queries per class")
    args = parser.parse_args()
    with temporary_database(sa.make_url(args.url), prefix="dms_bench_search") as url:
        engine = sa.create_engine(url)
        try:
            run(engine, args.documents, args.queries)
        finally:
            engine.dispose()


if __name__ == "__main__":
    main()
