"""The processing workload as a pgbench script with dms.jobs' own batched claim and completion.

A batch per transaction pair, as the Worker processes no-op jobs: the claim as its claimers run
it (``claim_batch`` with ``limit`` = the Worker's ``BATCH_SIZE``: ``BEGIN``, the claimer's
settings for the transaction, the claim, ``COMMIT``), then the batch's fenced completion
(``complete_many``) in an autocommit transaction of its own. Between the two, a statement
without a table turns the claim's JSON document into the completion's (position, id, worker,
attempt of each job), as the Worker does in Python. The Worker sends its claim's four
statements in one round trip (psycopg's pipeline mode); pgbench 15 refuses ``\\gset`` in a
pipeline, so here they take four. The SQL is compiled from dms.jobs' statements and its
parameters are replaced by pgbench literals and ``\\gset`` variables. What the Worker adds to
this bound is Python: decoding, its threads, the handler calls.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from datetime import timedelta
from typing import Any

from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine import URL, Engine

from bench.jobs import dms_queue
from dms.jobs import _statements as statements
from dms.jobs.claims import walked_tenants

PGBENCH = "/usr/lib/postgresql/15/bin/pgbench"
WORKER = "pgbench"


def _literal(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "NULL"}[value]
    if isinstance(value, int | float):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _sql(statement: Any, values: dict[str, str]) -> str:
    compiled = statement.compile(dialect=psycopg_dialect())  # type: ignore[no-untyped-call]
    text = str(compiled)
    for name, value in compiled.params.items():
        text = text.replace(f"%({name})s", values[name] if name in values else _literal(value))
    if "%(" in text:
        raise RuntimeError(f"unreplaced parameter in {text}")
    return re.sub(r"\s+", " ", text).strip()


def script(kind: str, batch: int) -> str:
    """The pgbench script: claim ``batch`` jobs of ``kind``, then complete them in one statement."""
    order = _sql(statements.claimer_settings_statement(), {})
    # The very same SQL as the Worker's claims while no tenant has limits (limits=False).
    claim = _sql(
        statements.claim_statement(True, limited=False),
        {
            "worker_id": f"'{WORKER}'",
            "limit": str(batch),
            "lease": f"'{int(timedelta(minutes=5).total_seconds())} seconds'",
            "kinds": f"'{{{kind}}}'",
            "after_tenant": "''",
            "tenants": str(walked_tenants(batch)),
        },
    )
    complete = _sql(statements.complete_many_statement(), {"acked": ":acked"})
    # The claim returns its jobs as one JSON document (dms.jobs._wire): [started, lease_end,
    # [[id, tenant, kind, payload, priority, attempts, ...], ...]]; the completion takes
    # [{position, id, locked_by, attempts}, ...].
    acked = (
        "SELECT json_agg(json_build_object('position', n, 'id', job ->> 0,"
        f" 'locked_by', '{WORKER}', 'attempts', (job ->> 5)::int)) AS acked"
        " FROM json_array_elements((:document)::json -> 2) WITH ORDINALITY AS t(job, n)"
    )
    return f"BEGIN;\n{order};\n{claim}\n\\gset\nCOMMIT;\n{acked}\n\\gset\n{complete};\n"


def process(url: URL, probe: Engine, count: int, clients: int, batch: int) -> float:
    """Jobs/s (pgbench's tps times ``batch``: one script run is one batch) over ``count`` jobs."""
    kind = f"bench.pgbench.{clients}"
    runs = max(1, count // (clients * batch))
    # A spare batch per client: the last claims never find the queue short.
    dms_queue.fill(probe, kind, (runs + 1) * clients * batch)
    dms_queue.vacuum(probe)
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as file:
        file.write(script(kind, batch))
        file.flush()
        conninfo = (
            f"host={url.host or '127.0.0.1'} port={url.port or 5432} "
            f"user={url.username} dbname={url.database}"
        )
        if url.password:
            conninfo += f" password={url.password}"
        result = subprocess.run(
            [
                PGBENCH,
                "-n",
                "-M",
                "prepared",  # typed parameters, not text substitution (dms.jobs prepares too)
                "-f",
                file.name,
                "-c",
                str(clients),
                "-j",
                str(min(clients, 2)),
                "-t",
                str(runs),
                conninfo,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
    dms_queue.delete_kind(probe, kind)
    found = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", result.stdout)
    if found is None:
        raise RuntimeError(f"no tps in pgbench output:\n{result.stdout}\n{result.stderr}")
    return float(found.group(1)) * batch
