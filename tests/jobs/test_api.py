"""The public surface of dms.jobs: curated, sorted, documented."""

from __future__ import annotations

import inspect

import dms
from dms import jobs
from dms.jobs.tables import JOB_STATES


def test_all_is_sorted_and_complete() -> None:
    assert jobs.__all__ == sorted(jobs.__all__)
    assert all(hasattr(jobs, name) for name in jobs.__all__)
    assert {"DocumentWorker", "Job", "JobState"} <= set(dms.__all__)


def test_every_public_name_is_documented() -> None:
    for name in jobs.__all__:
        assert inspect.getdoc(getattr(jobs, name)), name


def test_job_states_are_the_table_states() -> None:
    assert tuple(state.value for state in jobs.JobState) == JOB_STATES
