"""fail() records any handler error: NUL, lone surrogates and megabytes included."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.engine import Engine

from dms import jobs
from dms.jobs._failures import MAX_ERROR_CHARS, MAX_SUMMARY_CHARS

SURROGATE_NAME = b"scan-\xff.pdf".decode("utf-8", "surrogateescape")


@pytest.fixture
def tenant(module_tenant: str) -> str:
    """Every test here puts only jobs of its own kind in its tenant, and filters every assertion
    by it: they share the module's (a tenant costs a fifth of a second here, seconds on Citus)."""
    return module_tenant


def _open_scan() -> None:
    raise FileNotFoundError(f"{SURROGATE_NAME}\x00")


def _claimed(engine: Engine, kind: str, tenant: str) -> jobs.Job:
    with engine.begin() as conn:
        jobs.enqueue(conn, kind, {}, tenant=tenant)
        (job,) = jobs.dequeue(conn, "w1", kinds=[kind], lease=timedelta(minutes=5))
    return job


@pytest.mark.parametrize(
    ("error", "recorded"),
    [
        (f"cannot open {SURROGATE_NAME}", "cannot open scan-\\udcff.pdf"),
        ("nul \x00 in the middle", "nul \\x00 in the middle"),
        ("a literal \\x00 stays as written", "a literal \\x00 stays as written"),
    ],
)
def test_fail_records_text_postgresql_could_not_store(
    engine: Engine, tenant: str, kind: str, error: str, recorded: str
) -> None:
    job = _claimed(engine, kind, tenant)
    with engine.begin() as conn:
        failed = jobs.fail(conn, job, error)
    with engine.connect() as conn:
        stored = jobs.get(conn, job.id)
    assert (failed.last_error, stored.last_error) == (recorded, recorded)
    assert stored.errors[-1]["error"] == recorded
    assert stored.state is jobs.JobState.QUEUED


def test_fail_records_an_exception_with_a_surrogate_and_nul(
    engine: Engine, tenant: str, kind: str
) -> None:
    job = _claimed(engine, kind, tenant)
    with pytest.raises(FileNotFoundError, match="scan-") as caught:
        _open_scan()
    with engine.begin() as conn:
        jobs.fail(conn, job, caught.value)
    with engine.connect() as conn:
        stored = jobs.get(conn, job.id)
    assert stored.last_error is not None
    assert stored.last_error.startswith("Traceback (most recent call last):")
    assert stored.last_error.endswith("FileNotFoundError: scan-\\udcff.pdf\\x00")
    assert stored.errors[-1]["error"] == "FileNotFoundError: scan-\\udcff.pdf\\x00"


def test_fail_records_megabytes_cut_to_the_cap(engine: Engine, tenant: str, kind: str) -> None:
    job = _claimed(engine, kind, tenant)
    with engine.begin() as conn:
        jobs.fail(conn, job, "start " + "x" * 5_000_000 + " end")
    with engine.connect() as conn:
        stored = jobs.get(conn, job.id)
    assert stored.last_error is not None
    assert len(stored.last_error) <= MAX_ERROR_CHARS
    assert stored.last_error.startswith("start ")
    assert stored.last_error.endswith(" end")
    assert "characters cut" in stored.last_error
    assert len(stored.errors[-1]["error"]) <= MAX_SUMMARY_CHARS
