"""Benchmark of tenant creation and of fleet-wide status and no-op upgrade.

Prints the p50/p95 time to create one tenant (schema, every table, version row, registry row)
over N tenants, then, with the fleet grown to M tenants, the time of ``dms status`` and of a
no-op ``alembic upgrade head`` (each run as the real command, in a subprocess). Targets: p50
under 300 ms; status and no-op upgrade over 1,000 tenants under 10 s each.

    python bench/tenants.py [--url URL] [--create 50] [--fleet 1000]

Runs in a temporary database on the server of ``--url`` (default: DMS_DATABASE_URL or the
embedded server), dropped afterwards. Not a test: the machine is shared and timings are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

from dms import migrations, provisioning
from dms.db import database_url
from dms.testing import temporary_database
from dms.users import create_users_stand_in

REPO = Path(__file__).resolve().parent.parent


def _create_tenants(engine: sa.Engine, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        slug = f"b{uuid.uuid4().hex[:10]}"
        started = time.perf_counter()
        provisioning.create_tenant(engine, slug)
        timings.append(time.perf_counter() - started)
    return timings


def _timed_command(args: list[str], url: str) -> float:
    env = {**os.environ, "DMS_DATABASE_URL": url}
    started = time.perf_counter()
    subprocess.run(args, cwd=REPO, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--create", type=int, default=50)
    parser.add_argument("--fleet", type=int, default=1000)
    args = parser.parse_args()

    with temporary_database(database_url(args.url), prefix="dms_bench") as url:
        engine = sa.create_engine(url)
        create_users_stand_in(engine)
        migrations.upgrade(engine)
        created = _create_tenants(engine, args.create)
        p50 = statistics.median(created) * 1000
        p95 = statistics.quantiles(created, n=20)[-1] * 1000
        print(
            f"create tenant (n={args.create}): p50 {p50:.0f} ms, p95 {p95:.0f} ms; target p50 < 300"
        )
        _create_tenants(engine, max(0, args.fleet - args.create))
        engine.dispose()
        rendered = url.render_as_string(hide_password=False)
        status = _timed_command([sys.executable, "-m", "dms.cli", "status"], rendered)
        upgrade = _timed_command(
            [sys.executable, "-m", "alembic", "-c", str(REPO / "alembic.ini"), "upgrade", "head"],
            rendered,
        )
        print(f"dms status over {args.fleet} tenants: {status:.2f} s (target < 10 s)")
        print(
            f"no-op alembic upgrade head over {args.fleet} tenants: {upgrade:.2f} s (target < 10 s)"
        )


if __name__ == "__main__":
    main()
