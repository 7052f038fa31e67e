"""Benchmark of fleet operations at 1,000 and 10,000 tenants, end to end, as operators run them.

For each fleet size, in a temporary database of its own on the server of ``--url`` (default:
DMS_DATABASE_URL or the embedded server), dropped afterwards:

* bulk creation: ``dms tenants create --file NAMES --jobs N`` (total and per tenant), against
  one ``create_tenant`` call after another over a sample (the way before);
* ``dms status`` and a no-op ``dms migrate`` (both read the registry's copy of every tenant's
  revision); in process, ``fleet_status`` against the baseline of reading every tenant's own
  version table, as it did before revision 0007;
* a real additive migration (a column with a default and an index on ``documents``, in a
  bench-only revision on top of head) up and back down with ``alembic -x jobs=1`` and
  ``-x jobs=N``, and their ratio;
* ``dms check``;
* what the catalog weighs, the memory of one server connection after a unit of work in every
  tenant, and the time of a unit of work on a tenant its connection has not seen yet;
* ``dms tenants drop --all --jobs N``.

    python bench/fleet.py [--url URL] [--tenants 1000 10000] [--jobs 2] [--skip PHASE ...]
                          [--write]

``--skip`` leaves phases out (``serial``, ``memory``, ``additive``, ``drop``) where time is short;
``--write`` puts the results in bench/results/fleet.md, in a section per fleet size, server and
day (other sections are kept). Every command runs in a subprocess, as
typed. Not a test: the machine is shared and timings are noisy; ratios are of the same run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.schema import CreateSchema

from dms import UnitOfWork, migrations, provisioning, tenancy
from dms.config import settings_of
from dms.db import database_url
from dms.domain import DocumentQuery
from dms.migrations import MigrationScope
from dms.migrations.schema_step import migrate_schema
from dms.migrations.status import read_fleet_versions
from dms.testing import temporary_database
from dms.users import create_users_stand_in

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results" / "fleet.md"
#: Tenants created one call after another, for the "before" figure.
SERIAL_SAMPLE = 30
#: Tenants whose first unit of work on a fresh connection is timed.
FIRST_TOUCH_SAMPLE = 50

ADDITIVE_REVISION = '''"""Bench only: a column with a default and an index on documents."""

import sqlalchemy as sa

from alembic import op
from dms.migrations import MigrationScope

revision = "bench_additive"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        op.add_column(
            "documents",
            sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
            schema=scope.schema,
        )
        op.create_index("ix_documents_priority", "documents", ["priority"], schema=scope.schema)


def downgrade(*, scope: MigrationScope) -> None:
    if scope.is_tenant:
        op.drop_index("ix_documents_priority", "documents", schema=scope.schema)
        op.drop_column("documents", "priority", schema=scope.schema)
'''


@dataclass
class Figures:
    """The figures of one fleet size; written to the results as they come, with ``--write``."""

    tenants: int
    jobs: int
    write: bool
    #: ``PostgreSQL 18.6 (embedded server)``, as the results name it.
    server: str = "PostgreSQL"
    command: str = ""
    rows: list[tuple[str, str]] = field(default_factory=list)

    def add(self, name: str, value: str) -> None:
        print(f"[{self.tenants}] {name}: {value}", flush=True)
        self.rows.append((name, value))
        if self.write:
            _write(self)


def _env(url: URL) -> dict[str, str]:
    return {**os.environ, "DMS_DATABASE_URL": url.render_as_string(hide_password=False)}


def _timed(argv: list[str], url: URL, stdin: str | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        argv, cwd=REPO, env=_env(url), input=stdin, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode not in (0,):
        raise SystemExit(f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return elapsed


def _dms(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "dms", *arguments]


@contextmanager
def _scripts_with_additive_revision() -> Iterator[Path]:
    """A copy of dms's migrations plus the bench-only revision, and an alembic.ini for it."""
    folder = Path(tempfile.mkdtemp(prefix="dms_bench_scripts_"))
    try:
        shutil.copytree(migrations.script_location(), folder / "scripts")
        head = migrations.head_revision()
        (folder / "scripts" / "versions" / "bench_additive.py").write_text(
            ADDITIVE_REVISION.format(head=head)
        )
        ini = folder / "alembic.ini"
        ini.write_text(f"[alembic]\nscript_location = {folder / 'scripts'}\n")
        yield ini
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _catalog_size(engine: Engine) -> tuple[int, int]:
    """Bytes of pg_catalog's relations, and rows of pg_class."""
    with engine.connect() as conn:
        size = conn.scalar(
            sa.text(
                "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'r'"
            )
        )
        relations = conn.scalar(sa.text("SELECT count(*) FROM pg_class"))
    return int(size or 0), int(relations or 0)


def _unit_of_work(engine: Engine, slug: str) -> None:
    with UnitOfWork(engine, tenant=slug) as uow:
        uow.documents.search(DocumentQuery(), limit=20)
        uow.tags.all()
        uow.folders.children(None)
        uow.metadata.list_fields()


def _backend_memory(conn: sa.Connection) -> int:
    return int(conn.scalar(sa.text("SELECT sum(total_bytes) FROM pg_backend_memory_contexts")) or 0)


def _connection_memory(url: URL, slugs: list[str], figures: Figures) -> None:
    """One connection serves a unit of work in every tenant: its memory before and after."""
    engine = sa.create_engine(url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            before = _backend_memory(conn)
        first, warm = [], []
        for slug in slugs[:FIRST_TOUCH_SAMPLE]:
            started = time.perf_counter()
            _unit_of_work(engine, slug)
            first.append(time.perf_counter() - started)
            started = time.perf_counter()
            _unit_of_work(engine, slug)
            warm.append(time.perf_counter() - started)
        started = time.perf_counter()
        for slug in slugs[FIRST_TOUCH_SAMPLE:]:
            _unit_of_work(engine, slug)
        every = time.perf_counter() - started
        with engine.connect() as conn:
            after = _backend_memory(conn)
    finally:
        engine.dispose()
    figures.add(
        "unit of work on a tenant its connection has not seen / has seen (p50)",
        f"{statistics.median(first) * 1000:.1f} / {statistics.median(warm) * 1000:.1f} ms",
    )
    figures.add(
        "memory of one server connection: fresh / after a unit of work in every tenant",
        f"{before / 2**20:.1f} / {after / 2**20:.0f} MiB ({len(slugs)} tenants in {every:.0f} s)",
    )


def _create_through_alembic(engine: Engine, slug: str) -> None:
    """A tenant created as before the recording: the tenant revisions run by Alembic."""
    settings = settings_of(engine)
    with engine.begin() as conn:
        tenancy.register(conn, slug)
        schema = tenancy.schema_name(slug)
        conn.execute(CreateSchema(schema))
        migrate_schema(conn, MigrationScope.tenant(schema, settings), migrations.head_revision())


def _serial_create(engine: Engine, figures: Figures) -> None:
    """Tenants created one call after another, from the recording and through Alembic, in turn."""
    recorded, alembic = [], []
    provisioning.create_tenant(engine, "serial_warm")  # the recording is made once per process
    for index in range(SERIAL_SAMPLE):
        started = time.perf_counter()
        provisioning.create_tenant(engine, f"serial_{index:03d}")
        recorded.append(time.perf_counter() - started)
        started = time.perf_counter()
        _create_through_alembic(engine, f"alembic_{index:03d}")
        alembic.append(time.perf_counter() - started)
    made = ["serial_warm"] + [
        f"{kind}_{index:03d}" for kind in ("serial", "alembic") for index in range(SERIAL_SAMPLE)
    ]
    provisioning.drop_tenants(engine, made)
    fast, slow = statistics.median(recorded), statistics.median(alembic)
    figures.add(
        "create_tenant one call after another, recorded SQL / Alembic per tenant "
        f"(p50 of {SERIAL_SAMPLE})",
        f"{fast * 1000:.0f} / {slow * 1000:.0f} ms ({slow / fast:.1f}x)",
    )


def _server_name(engine: Engine, embedded: bool) -> str:
    with engine.connect() as conn:
        version = conn.scalar(sa.text("SHOW server_version"))
    where = "the embedded server" if embedded else "the server of --url / DMS_DATABASE_URL"
    return f"PostgreSQL {str(version).split()[0]} ({where})"


def _status_in_process(url: URL, count: int, figures: Figures) -> None:
    """fleet_status (the registry's copy) against every tenant's own version table (before 0007).

    Each on new connections (``NullPool``), so neither finds a server cache warmed by the other.
    """
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        schemas = [tenancy.schema_name(f"t{index:05d}") for index in range(count)]
        started = time.perf_counter()
        read_fleet_versions(engine, schemas)
        every_table = time.perf_counter() - started
        started = time.perf_counter()
        migrations.fleet_status(engine)
        registry = time.perf_counter() - started
    finally:
        engine.dispose()
    figures.add(
        "fleet_status in process: the registry's copy / every tenant's version table "
        "(how it read before 0007)",
        f"{registry:.2f} s / {every_table:.2f} s ({every_table / registry:.1f}x)",
    )


def _run_size(
    server: URL, count: int, jobs: int, *, write: bool, skip: set[str], embedded: bool
) -> Figures:
    figures = Figures(count, jobs, write, command=_command_line(count, jobs, skip, write))
    with temporary_database(server, prefix=f"dms_fleet_{count}") as url:
        engine = sa.create_engine(url, poolclass=sa.NullPool)
        figures.server = _server_name(engine, embedded)
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        empty_catalog, empty_relations = _catalog_size(engine)
        if "serial" not in skip:
            _serial_create(engine, figures)

        names = "\n".join(f"t{index:05d}" for index in range(count)) + "\n"
        took = _timed(_dms("tenants", "create", "--file", "-", "--jobs", str(jobs)), url, names)
        figures.add(
            f"dms tenants create --file - --jobs {jobs}",
            f"{took:.1f} s ({took / count * 1000:.1f} ms per tenant)",
        )
        catalog, relations = _catalog_size(engine)
        figures.add(
            "catalog (pg_catalog tables and indexes)",
            f"{empty_catalog / 2**20:.0f} MiB empty, {catalog / 2**20:.0f} MiB with the tenants "
            f"({(catalog - empty_catalog) / count / 1024:.0f} KiB per tenant); "
            f"{relations - empty_relations} relations more",
        )
        figures.add("dms status", f"{_timed(_dms('status'), url):.2f} s")
        _status_in_process(url, count, figures)
        figures.add("no-op dms migrate", f"{_timed(_dms('migrate'), url):.2f} s")
        figures.add("dms check", f"{_timed(_dms('check'), url):.2f} s")
        slugs = [f"t{index:05d}" for index in range(count)]
        if "memory" not in skip:
            _connection_memory(url, slugs, figures)
        if "additive" not in skip:
            _additive_migration(url, jobs, figures)
        if "drop" not in skip:
            took = _timed(_dms("tenants", "drop", "--all", "--yes", "--jobs", str(jobs)), url)
            figures.add(
                f"dms tenants drop --all --jobs {jobs}",
                f"{took:.1f} s ({took / count * 1000:.1f} ms per tenant)",
            )
        engine.dispose()
    return figures


def _command_line(count: int, jobs: int, skip: set[str], write: bool) -> str:
    argv = ["python", "bench/fleet.py", "--tenants", str(count), "--jobs", str(jobs)]
    argv += ["--skip", *sorted(skip)] if skip else []
    return " ".join(argv + (["--write"] if write else []))


def _additive_migration(url: URL, jobs: int, figures: Figures) -> None:
    with _scripts_with_additive_revision() as ini:
        alembic = [sys.executable, "-m", "alembic", "-c", str(ini)]
        times: dict[tuple[str, int], float] = {}
        for workers in (1, jobs):
            times["up", workers] = _timed(
                [*alembic, "-x", f"jobs={workers}", "upgrade", "head"], url
            )
            times["down", workers] = _timed(
                [*alembic, "-x", f"jobs={workers}", "downgrade", "-1"], url
            )
    for direction in ("up", "down"):
        one, many = times[direction, 1], times[direction, jobs]
        figures.add(
            f"additive migration {direction}: --jobs 1 / --jobs {jobs}",
            f"{one:.1f} s / {many:.1f} s ({one / many:.2f}x)",
        )


def _write(figures: Figures) -> None:
    """Replace this fleet size's section of this server and day; keep every other section."""
    day = f"{datetime.now(timezone.utc):%Y-%m-%d}"
    heading = f"## {figures.tenants:,} tenants, {figures.server.split(' (')[0]}, {day}"
    text = RESULTS.read_text() if RESULTS.exists() else "# Fleet benchmark\n"
    preamble, *sections = text.split("\n## ")
    kept = {"## " + part.split("\n", 1)[0]: "## " + part for part in sections}
    kept[heading] = "\n".join(
        [
            heading,
            "",
            f"`{figures.command}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"{figures.server}, this 2-core machine shared with other work (load average "
            f"{os.getloadavg()[0]:.1f} at the end).",
            "",
            "| figure | value |",
            "|---|---|",
            *(f"| {name} | {value} |" for name, value in figures.rows),
            "",
        ]
    )
    # By fleet size; sections of one size in the order they were first written.
    ordered = sorted(kept, key=lambda title: int(title[3:].split()[0].replace(",", "")))
    RESULTS.write_text(preamble.rstrip("\n") + "\n\n" + "\n".join(kept[t] for t in ordered))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="server to run on (a temporary database)")
    parser.add_argument("--tenants", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes for --jobs N")
    parser.add_argument(
        "--skip",
        nargs="+",
        default=[],
        choices=["serial", "memory", "additive", "drop"],
        help="phases to leave out",
    )
    parser.add_argument("--write", action="store_true", help="write bench/results/fleet.md")
    args = parser.parse_args()
    server = database_url(args.url)
    embedded = args.url is None and not os.environ.get("DMS_DATABASE_URL")
    for count in args.tenants:
        _run_size(
            server, count, args.jobs, write=args.write, skip=set(args.skip), embedded=embedded
        )


if __name__ == "__main__":
    main()
