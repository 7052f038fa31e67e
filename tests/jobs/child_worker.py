"""A worker in a child process, for tests that kill or signal it.

``python -m tests.jobs.child_worker crash URL KIND TENANT``: work KIND with a 1 s lease; the
handler writes its effect and then kills its own process with SIGKILL, before committing.

``python -m tests.jobs.child_worker serve URL KIND TENANT``: work KIND until SIGTERM/SIGINT with
a 1 s grace period; the handler blocks for a minute.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta

import sqlalchemy as sa

from dms import jobs
from dms.uow import UnitOfWork
from tests.jobs.conftest import job_effects


def _write_effect(uow: UnitOfWork, job: jobs.Job) -> None:
    uow.connection.execute(
        sa.insert(job_effects).values(job_id=job.id, attempt=job.attempts, worker="child")
    )


def crash(uow: UnitOfWork, job: jobs.Job) -> None:
    """Write, then die before the unit of work commits."""
    _write_effect(uow, job)
    os.kill(os.getpid(), signal.SIGKILL)


def block(uow: UnitOfWork, job: jobs.Job) -> None:
    """Write, then take far longer than the grace period."""
    _write_effect(uow, job)
    time.sleep(60)


def main(mode: str, url: str, kind: str) -> None:
    """Run the worker of ``mode``."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    handler = crash if mode == "crash" else block
    worker = jobs.Worker(
        engine,
        {kind: handler},
        lease=timedelta(seconds=1),
        poll_seconds=0.1,
        grace_seconds=1.0,
    )
    worker.run_until_stopped()


if __name__ == "__main__":
    main(*sys.argv[1:4])
