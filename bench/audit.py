"""What the audit trail costs: units of work with it against without it, verification, bytes.

Two tenants of one database: ``audited`` as migrated, ``plain`` with the audit triggers of its
tables disabled (what dms did before revision 0013). ``--threads`` threads run units of work
that each create a document with a tag and add its revision (four events), in alternating
rounds of ``--seconds`` on each tenant, so that the machine's noise falls on both alike; the
ratio of their rates is what counts. Then ``--events`` more events are written to ``audited`` in
bulk, sealed and verified, timed; bytes per event are the events table's total size (heap,
TOAST and indexes) over its rows.

    python bench/audit.py [--url URL] [--threads 8] [--seconds 10] [--events 200000] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.engine import URL, Connection, Engine

from dms import migrations, provisioning, tenancy
from dms.audit import seal_audit_trail, verify_audit_trail
from dms.db import normalize_url
from dms.domain import NewDocument
from dms.schema.ddl import execute_ddl
from dms.services import add_revision, create_document
from dms.testing import temporary_database
from dms.uow import UnitOfWork
from dms.users import create_user, create_users_stand_in

RESULTS = Path(__file__).parent / "results" / "audit.md"
ROUNDS = 3
_pg_trigger = sa.table("pg_trigger", sa.column("tgname"), sa.column("tgrelid"), schema="pg_catalog")
_pg_namespace = sa.table(
    "pg_namespace", sa.column("oid"), sa.column("nspname"), schema="pg_catalog"
)
_pg_class = sa.table(
    "pg_class",
    sa.column("oid"),
    sa.column("relname"),
    sa.column("relnamespace"),
    schema="pg_catalog",
)


def main() -> None:
    """Measure and print (or ``--write``) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args()
    with temporary_database(normalize_url(args.url), prefix="dms_bench_audit") as url:
        engine, user = _prepare(url, args.threads)
        rates: dict[str, list[float]] = {"audited": [], "plain": []}
        for _ in range(ROUNDS):
            for slug, measured in rates.items():
                measured.append(_units_per_second(engine, slug, user, args))
        chain = _chain(engine, user, args.events)
        engine.dispose()
    text = _table(args, rates, chain)
    print(text)
    if args.write:
        RESULTS.write_text(text)


def _prepare(url: URL, threads: int) -> tuple[Engine, uuid.UUID]:
    # Commits without waiting for the disk: the comparison is of the work the trail adds, which
    # a flush per commit (milliseconds on this machine's disk) would hide.
    engine = sa.create_engine(
        url, pool_size=threads + 2, connect_args={"options": "-c synchronous_commit=off"}
    )
    create_users_stand_in(engine)
    migrations.upgrade(engine)
    for slug in ("audited", "plain"):
        provisioning.create_tenant(engine, slug)
    with engine.begin() as conn:
        user = create_user(conn, email="bench@example.org", display_name="Bench")
        schema = tenancy.schema_name("plain")
        triggers = _audit_triggers(conn, schema)
        if not triggers:  # else "without" would silently measure the trail too
            raise SystemExit(f"no audit triggers found in {schema}: is it at revision 0013?")
        for trigger, table in triggers:
            execute_ddl(
                conn,
                sql.SQL("ALTER TABLE {}.{} DISABLE TRIGGER {}").format(
                    sql.Identifier(schema), sql.Identifier(table), sql.Identifier(trigger)
                ),
            )
    return engine, user


def _audit_triggers(conn: Connection, schema: str) -> list[tuple[str, str]]:
    """(trigger, table) of the triggers that write events (migration 0013), from the catalog."""
    writes_events = sa.or_(
        _pg_trigger.c.tgname == "audit_row", _pg_trigger.c.tgname.startswith("audit_links_")
    )
    found = conn.execute(
        sa.select(_pg_trigger.c.tgname, _pg_class.c.relname)
        .join_from(_pg_trigger, _pg_class, _pg_class.c.oid == _pg_trigger.c.tgrelid)
        .join(_pg_namespace, _pg_namespace.c.oid == _pg_class.c.relnamespace)
        .where(_pg_namespace.c.nspname == schema, writes_events)
    )
    return [(row.tgname, row.relname) for row in found]


def _units_per_second(
    engine: Engine, slug: str, user: uuid.UUID, args: argparse.Namespace
) -> float:
    with UnitOfWork(engine, tenant=slug, user_id=user) as uow:
        tag = uow.tags.add(name=f"t-{uuid.uuid4().hex[:8]}")
        uow.commit()
    done = [0] * args.threads
    deadline = time.perf_counter() + args.seconds

    def work(n: int) -> None:
        while time.perf_counter() < deadline:
            with UnitOfWork(engine, tenant=slug, user_id=user, context={"bench": n}) as uow:
                doc = create_document(uow, title=f"{uuid.uuid4().hex}.pdf", tag_ids=[tag.id])
                digest = uuid.uuid4().hex * 2
                add_revision(
                    uow,
                    doc.id,
                    storage_key=f"bench/{digest}",
                    sha256=digest,
                    size_bytes=1,
                    mime_type="application/pdf",
                )
                uow.commit()
            done[n] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(n,)) for n in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def _chain(engine: Engine, user: uuid.UUID, events: int) -> dict[str, float]:
    batch = 20_000
    for start in range(0, events, batch):
        with UnitOfWork(engine, tenant="audited", user_id=user) as uow:
            titles = [NewDocument(title=f"bulk-{start + i}", folder_id=None) for i in range(batch)]
            uow.documents.add_many(titles[: min(batch, events - start)])
            uow.commit()
    started = time.perf_counter()
    sealed = seal_audit_trail(engine, "audited")
    seal_seconds = time.perf_counter() - started
    started = time.perf_counter()
    report = verify_audit_trail(engine, "audited", seal=False)
    verify_seconds = time.perf_counter() - started
    assert report.intact, report.problem  # noqa: S101 (a broken chain makes the figures void)
    with engine.connect() as conn:
        schema = tenancy.schema_name("audited")
        size = conn.execute(
            sa.select(sa.func.pg_total_relation_size(sa.literal(f'"{schema}".audit_events')))
        ).scalar_one()
    return {
        "checked": report.checked,
        "sealed": sealed,
        "seal_rate": sealed / seal_seconds,
        "verify_rate": report.checked / verify_seconds,
        "bytes": size / report.checked,
    }


def _table(args: argparse.Namespace, rates: dict[str, list[float]], chain: dict[str, float]) -> str:
    audited, plain = (statistics.median(rates[slug]) for slug in ("audited", "plain"))
    verify = f"{chain['verify_rate']:,.0f}"
    rounds = ", ".join(
        f"{a:.0f}/{p:.0f}" for a, p in zip(rates["audited"], rates["plain"], strict=True)
    )
    return f"""# The audit trail's cost

`python bench/audit.py --threads {args.threads} --seconds {args.seconds:g} --events {args.events}`
(one run, PostgreSQL on this machine, `synchronous_commit=off` so that disk flushes do not
hide the work; {ROUNDS} alternating rounds, medians). A unit of work creates a document with a
tag and adds its revision: four events.

| measure | target | result |
| --- | --- | --- |
| units of work/s at {args.threads} threads, with the trail | | {audited:,.0f} |
| units of work/s at {args.threads} threads, without it (triggers disabled) | | {plain:,.0f} |
| with / without | >= 0.8x | **{audited / plain:.2f}x** |
| sealing, events/s ({chain["sealed"]:,.0f} events) | | {chain["seal_rate"]:,.0f} |
| verification, events/s ({chain["checked"]:,.0f} events) | >= 100,000 | **{verify}** |
| bytes per event (heap, TOAST, indexes) | | {chain["bytes"]:,.0f} |

Rounds (with/without, units/s): {rounds}.
"""


if __name__ == "__main__":
    main()
