"""A worker in a child process, for tests that kill or signal it.

``python -m tests.jobs.child_worker crash URL KIND TENANT``: work KIND with a 1 s lease; the
handler writes its effect and then kills its own process with SIGKILL, before committing.

``python -m tests.jobs.child_worker serve URL KIND TENANT``: work KIND until SIGTERM/SIGINT with
a 1 s grace period; the handler blocks for a minute.

``python -m tests.jobs.child_worker effects URL KIND``: work KIND with 2 runners and a 1 s
lease; the handler writes its effect and takes a few milliseconds. Once its SIGTERM handler is
installed and the worker started it prints ``ready`` on stdout (a child signalled before would
die of the signal's default action, with nothing to report). At SIGTERM the worker's stats are
printed as one line of JSON on stdout (before the stop, so that ``runners_alive`` says how many
runners survived), then it stops.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta

import sqlalchemy as sa

from dms import jobs
from dms.jobs.worker import JobUnitOfWork
from tests.jobs.conftest import job_effects


def _write_effect(uow: JobUnitOfWork, job: jobs.Job) -> None:
    uow.connection.execute(
        sa.insert(job_effects).values(job_id=job.id, attempt=job.attempts, worker="child")
    )


def crash(uow: JobUnitOfWork, job: jobs.Job) -> None:
    """Write, then die before the unit of work commits."""
    _write_effect(uow, job)
    os.kill(os.getpid(), signal.SIGKILL)


def block(uow: JobUnitOfWork, job: jobs.Job) -> None:
    """Write, then take far longer than the grace period."""
    _write_effect(uow, job)
    time.sleep(60)


def work(uow: JobUnitOfWork, job: jobs.Job) -> None:
    """Write, then take a little while."""
    _write_effect(uow, job)
    time.sleep(EFFECT_SECONDS)


#: How long a job of the ``effects`` mode takes after its write.
EFFECT_SECONDS = 0.005
#: What the ``effects`` mode prints once a SIGTERM would reach its handler.
READY = "ready"


def serve_effects(url: str, kind: str) -> None:
    """The ``effects`` mode: stats on stdout at SIGTERM, then a graceful stop."""
    engine = sa.create_engine(url, pool_pre_ping=True)
    worker = jobs.Worker(
        engine,
        {kind: work},
        jobs.WorkerConfig(concurrency=2, lease=timedelta(seconds=1), poll_seconds=0.1),
    )
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    worker.start()
    print(READY, flush=True)
    while not stopped.wait(0.2):
        pass
    print(json.dumps(dataclasses.asdict(worker.stats())), flush=True)
    worker.stop(grace_seconds=2.0)


def main(mode: str, url: str, kind: str) -> None:
    """Run the worker of ``mode``."""
    if mode == "effects":
        serve_effects(url, kind)
        return
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    handler = crash if mode == "crash" else block
    worker = jobs.Worker(
        engine,
        {kind: handler},
        jobs.WorkerConfig(lease=timedelta(seconds=1), poll_seconds=0.1, grace_seconds=1.0),
    )
    worker.run_until_stopped()


if __name__ == "__main__":
    main(*sys.argv[1:4])
