"""The processing workload as a pgbench script with dms.jobs' own claim and complete SQL.

One job per transaction pair: the claim as the Worker's claimer runs it (``claim_batch`` with
``limit 1``: ``BEGIN``, the claimer's settings for the transaction, the claim, ``COMMIT``),
then the fenced completion (``complete``) in an autocommit transaction of its own. Between
the two, a statement without a table reads the job's id and attempt out of the claim's JSON
document, as the Worker does in Python. The Worker sends its claim's four statements in one
round trip (psycopg's pipeline mode); pgbench 15 refuses ``\\gset`` in a pipeline, so here they
take four. The SQL is compiled from dms.jobs' statements and its parameters are replaced by
pgbench literals and ``\\gset`` variables.
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
from dms.jobs import statements

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


def script(kind: str) -> str:
    """The pgbench script: claim one job of ``kind``, then complete it."""
    order = _sql(statements.claimer_settings_statement(), {})
    claim = _sql(
        statements.claim_statement(True),  # the bound runs the very same SQL
        {
            "worker_id": f"'{WORKER}'",
            "limit": "1",
            "lease": f"'{int(timedelta(minutes=5).total_seconds())} seconds'",
            "kinds": f"'{{{kind}}}'",
        },
    )
    complete = _sql(
        statements.fenced_statement("complete"),
        {"job_id": ":id", "fence_worker": f"'{WORKER}'", "fence_attempt": ":attempts"},
    )
    # The claim returns its jobs as one JSON document (dms.jobs.wire); pgbench reads the id and
    # attempt of the job out of it with one more statement, outside the transactions.
    read = (
        "SELECT job ->> 0 AS id, (job ->> 5)::int AS attempts"
        " FROM json_array_elements((:document)::json -> 2) AS job"
    )
    return f"BEGIN;\n{order};\n{claim}\n\\gset\nCOMMIT;\n{read}\n\\gset\n{complete};\n"


def process(url: URL, probe: Engine, count: int, clients: int) -> float:
    """Jobs/s (pgbench's tps: one script run is one job) over ``count`` queued jobs."""
    kind = f"bench.pgbench.{clients}"
    per_client = count // clients
    # A few spare jobs: the last claims never find the queue empty.
    dms_queue.fill(probe, kind, per_client * clients + clients)
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as file:
        file.write(script(kind))
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
                str(per_client),
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
    return float(found.group(1))
