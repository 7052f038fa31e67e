"""Migration 0005: the state cancelled; its downgrade refuses while cancelled jobs exist."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dms import jobs, migrations
from dms.config import SHARED_SCHEMA
from dms.errors import MigrationError
from dms.jobs.tables import processing_jobs
from tests.migrations.fingerprint import fingerprint, revisions


def _cancelled_job(engine: Engine) -> jobs.Job:
    with engine.begin() as conn:
        enqueued = jobs.enqueue(conn, "test.migrations.cancel", {}, tenant="alpha")
        return jobs.cancel(conn, enqueued.job_id)


def test_downgrade_refuses_while_jobs_are_cancelled_and_goes_once_they_are_not(
    fleet: Engine,
) -> None:
    job = _cancelled_job(fleet)
    before = fingerprint(fleet, SHARED_SCHEMA)
    revision_before = revisions(fleet, SHARED_SCHEMA)

    with pytest.raises(MigrationError) as refused:
        migrations.downgrade(fleet, "0004")
    kept = revisions(fleet, SHARED_SCHEMA)
    after_refusal = fingerprint(fleet, SHARED_SCHEMA)
    with fleet.begin() as conn:
        conn.execute(sa.delete(processing_jobs).where(processing_jobs.c.id == job.id))
    migrations.downgrade(fleet, "0004")

    assert "1 job(s) are cancelled" in str(refused.value)
    assert str(job.id) in str(refused.value)
    assert "stay at 0005" in str(refused.value)
    assert kept == revision_before  # the shared schema's steps down are one transaction
    assert after_refusal == before  # the refused schema was left exactly as it was
    assert revisions(fleet, SHARED_SCHEMA) == {SHARED_SCHEMA: "0004"}


def test_a_job_cannot_be_cancelled_at_0004_and_can_after_the_upgrade(fleet: Engine) -> None:
    with fleet.begin() as conn:
        enqueued = jobs.enqueue(conn, "test.migrations.cancel", {}, tenant="alpha")
    migrations.downgrade(fleet, "0004")
    with fleet.begin() as conn, pytest.raises(MigrationError, match="run `dms migrate` first"):
        jobs.cancel(conn, enqueued.job_id)
    migrations.upgrade(fleet)
    with fleet.begin() as conn:
        cancelled = jobs.cancel(conn, enqueued.job_id)
    assert cancelled.state is jobs.JobState.CANCELLED
